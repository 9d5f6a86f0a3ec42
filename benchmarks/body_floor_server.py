"""The least an aiohttp server can do with a completion request: `make bench`'s mock_cpu reference.

It reads the body as the mock does (kvbench.mock.api.http_replies.read_body, with the mock's allocator
settings, kvbench.mock.allocator) and streams 16 fixed token events, a usage chunk and [DONE] the
way the mock's SseWriter does (one write per token, the last with the rest): no JSON decode, no
tokenizer, no cache, no model. The CPU it spends per request, for a 120k-token body against a
16-token one, is what receiving the body costs any aiohttp server on this machine: the part of the
mock's own figure no model work can remove.

    python benchmarks/body_floor_server.py   -> one JSON line {"base_url", "pid"}; exits on stdin EOF
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kvbench.mock.allocator import keep_large_buffers
from kvbench.mock.api.http_replies import read_body

TOKENS = 16
_HEAD = b'data: {"id":"cmpl-floor","object":"text_completion","created":0,"model":"m","choices":['
_EVENT = _HEAD + b'{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'
_USAGE = _HEAD + (
    b'],"usage":{"prompt_tokens":0,"total_tokens":16,"completion_tokens":16,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}\n\n'
)


async def completions(request: web.Request) -> web.StreamResponse:
    await read_body(request)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    for _ in range(TOKENS - 1):
        await resp.write(_EVENT)
    await resp.write_eof(_EVENT + _USAGE + b"data: [DONE]\n\n")
    return resp


async def main() -> None:
    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(json.dumps({"base_url": f"http://127.0.0.1:{port}", "pid": os.getpid()}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


if __name__ == "__main__":
    if os.environ.get("KVBENCH_MOCK_MALLOPT", "1") != "0":
        keep_large_buffers()  # as the mock does (kvbench/mock/allocator.py)
    asyncio.run(main())
