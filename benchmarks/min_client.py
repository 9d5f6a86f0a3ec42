"""The floor: a minimal raw-socket streaming client (no parsing, no records), for `make bench`.

28 connections, closed loop, each request written whole and its response read to the end of
the chunked body; request ids m-0, m-1, ... so the ground truth can be matched. Shows what the
server-side in-flight figure is with a client that costs almost nothing.

    python benchmarks/min_client.py BASE_URL REQUESTS [CONCURRENCY]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys


async def worker(host: str, port: int, ids: itertools.count, total: int, body: bytes) -> None:
    r, w = await asyncio.open_connection(host, port)
    while (i := next(ids)) < total:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: m-%d\r\nContent-Length: %d\r\n\r\n"
        w.write(head % (i, len(body)) + body)
        await r.readuntil(b"0\r\n\r\n")
    w.close()


async def main(url: str, total: int, conc: int) -> None:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    body = json.dumps({"model": "m", "max_tokens": 16, "stream": True, "prompt": "hello " * 1000}).encode()
    ids = itertools.count()
    await asyncio.gather(*(worker(host, int(port), ids, total, body) for _ in range(conc)))


if __name__ == "__main__":
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ModuleNotFoundError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 28))
