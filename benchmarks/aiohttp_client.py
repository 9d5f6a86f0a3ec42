"""The reference peer: a plain aiohttp streaming client, as most hand-written benchmarks are (`make bench`).

N connections, closed loop, each request's TTFT stamped the way such clients do it:
perf_counter before `session.post`, and again when a body chunk carrying a content token
has been read (`iter_any`, like vLLM's bench). Request ids a-0, a-1, ... go in X-Request-Id
so the ground truth can be matched; one JSON line per request to OUT.

    python benchmarks/aiohttp_client.py BASE_URL REQUESTS CONCURRENCY OUT.jsonl
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time

import aiohttp


async def one(session: aiohttp.ClientSession, url: str, rid: str, body: bytes) -> dict[str, object]:
    headers = {"Content-Type": "application/json", "X-Request-Id": rid}
    sent = time.perf_counter_ns()
    first = None
    ok = False
    async with session.post(url, data=body, headers=headers) as resp:
        async for chunk in resp.content.iter_any():
            if first is None and b'"text":"' in chunk:
                first = time.perf_counter_ns()
            ok = ok or b"[DONE]" in chunk
    return {
        "request_id": rid,
        "sent_ns": sent,
        "first_token_ns": first,
        "end_ns": time.perf_counter_ns(),
        "ok": ok,
    }


async def main(base_url: str, total: int, conc: int, out: str) -> None:
    body = json.dumps(
        {"model": "m", "prompt": "hello " * 1000, "max_tokens": 16, "stream": True, "ignore_eos": True}
    ).encode()
    url = base_url + "/v1/completions"
    ids = itertools.count()
    rows: list[dict[str, object]] = []

    async def worker(session: aiohttp.ClientSession) -> None:
        while (i := next(ids)) < total:
            rows.append(await one(session, url, f"a-{i}", body))

    connector = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(conc)))
    with open(out, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ModuleNotFoundError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
