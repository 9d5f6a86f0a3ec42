"""Build and verify N prompts of T tokens against a server's /tokenize, as the runner does.

    python benchmarks/prompt_build.py BASE_URL N T   -> one JSON line {"build_s", "exact", ...}

Uses kvbench.engines.token_count.server_token_counter + kvbench.load.prompts.bounded_counter/build_prompts
(what runner.make_prompt_set calls); the clock covers build_prompts only.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import numpy as np

from kvbench.client import make_session
from kvbench.client.control import ControlClient
from kvbench.engines.token_count import server_token_counter
from kvbench.load.prompts import bounded_counter, build_prompts, make_salt


async def main(base_url: str, n: int, tokens: int) -> dict[str, object]:
    async with make_session(4, 10.0) as session:
        http = ControlClient(session, base_url, {})
        _, body = await http.request("GET", "/v1/models")
        model = body["data"][0]["id"]
        counter = await server_token_counter(http, model, "generic")
        assert counter is not None, "the server has no /tokenize"
        t0 = time.perf_counter()
        prompts = await build_prompts(
            [tokens] * n,
            seed=0,
            counter=bounded_counter(counter),
            sample_salt=make_salt(np.random.default_rng(0)),
        )
        elapsed = time.perf_counter() - t0
    exact = sum(p.actual_tokens == tokens for p in prompts)
    return {
        "build_s": elapsed,
        "prompts": n,
        "tokens": tokens,
        "exact": exact,
        "chars_mean": sum(len(p.body) for p in prompts) / n,
    }


if __name__ == "__main__":
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ModuleNotFoundError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as r:
        print(json.dumps(r.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
