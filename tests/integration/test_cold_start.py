"""Cold-start verification behind failing probes, the generic engine's rule, and a 413 from /tokenize.

#13 item 4: a cold start counts as verified only when BOTH probes (send, reset, send again) were
answered; a server answering 503, or one whose first probe failed, used to "verify". An engine
without a reset (generic, detected or named) stops a `verify: required` run unless
--allow-unverified-cold. #13 item 10: a 413 from /tokenize is one line, exit 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kvbench.errors import ColdUnverified
from kvbench.mock.api.server import MockApp, MockServer
from kvbench.mock.faults import FaultDecision, FaultPlan
from kvbench.mock.spawn import spawned_mock
from kvbench.results import read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

SMALL = {"prompts.count": 2, "prompts.lengths": [300], "load.requests": 2, "load.concurrency": 1}


async def run(base_url: str, tmp_path: Path, test: str = "throughput", allow: bool = False, **overrides):
    small = SMALL if test == "throughput" else {"prompts.lengths": [300], "cache.warm_repeats": 1}
    scn, _ = load_scenario(test, {**small, "target.base_url": base_url, **overrides})
    opts = RunOptions(output_dir=tmp_path, quiet=True, report=False, allow_unverified_cold=allow)
    return await run_scenario(scn, opts)


def only_manifest(tmp_path: Path) -> dict:
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "manifest.json").exists()]
    return read_manifest(run_dir)


async def test_every_request_503_does_not_verify(tmp_path):
    async with spawned_mock(profile="ci", faults=["error_rate=1", "error_status=503"]) as mock:
        with pytest.raises(ColdUnverified, match="first probe failed: http_503"):
            await run(mock.base_url, tmp_path / "required")
        outcome = await run(mock.base_url, tmp_path / "best", **{"cache.verify": "best_effort"})
    cold = read_manifest(outcome.run_dir)["cold_start"]
    assert cold["verified"] is None and cold["reset"] is True  # was: verified true
    assert "http_503" in cold["detail"]
    manifest = only_manifest(tmp_path / "required")
    assert manifest["status"] == "failed" and "cannot verify a cold cache" in manifest["error"]


async def test_failed_first_probe_then_clean_second_does_not_verify(tmp_path, monkeypatch):
    # the 1st, 3rd, 5th... completion fails: every first probe, never a second one (preflight's
    # timed probe, one per run, is answered and left out of the count)
    def odd_requests_fail(self: FaultPlan) -> FaultDecision:
        if getattr(self, "request_id", "").startswith("transport-probe"):
            return FaultDecision(self.count)
        self.count += 1
        return FaultDecision(self.count, error_status=503 if self.count % 2 else None)

    from kvbench.mock.api import completions

    complete = completions._complete

    async def tagged(app: MockApp, request: web.Request, chat: bool, trace: Any) -> web.StreamResponse:
        app.faults.request_id = trace.request_id  # type: ignore[attr-defined]
        return await complete(app, request, chat, trace)

    monkeypatch.setattr(completions, "_complete", tagged)
    monkeypatch.setattr(FaultPlan, "next", odd_requests_fail)
    async with MockServer(profile="ci") as mock:
        with pytest.raises(ColdUnverified, match="first probe failed"):
            await run(mock.base_url, tmp_path / "required", test="ttft")
        outcome = await run(mock.base_url, tmp_path / "best", test="ttft", **{"cache.verify": "best_effort"})
    cold = read_manifest(outcome.run_dir)["cold_start"]
    assert cold["verified"] is None and cold["probe_cached_tokens"] == 0  # clean second probe, yet unverified


# -- a tiny OpenAI-compatible server that names no known engine and has no reset ---------------------


@contextlib.asynccontextmanager
async def tiny_server(tokenize_limit: int | None = None) -> AsyncIterator[str]:
    async def models(_r: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny", "owned_by": "acme"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for word in ("hello", " there")[: body.get("max_tokens", 2)]:
            await resp.write(
                b"data: " + json.dumps({"choices": [{"index": 0, "text": word}]}).encode() + b"\n\n"
            )
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def tokenize(request: web.Request) -> web.Response:
        if tokenize_limit is None:
            return web.Response(status=404)
        if (request.content_length or 0) > tokenize_limit:  # a proxy's client_max_body_size
            return web.Response(status=413, text="<html><title>413 Request Entity Too Large</title></html>")
        text = (await request.json()).get("prompt", "")
        return web.json_response({"count": len(text.split())})

    app = web.Application()
    app.add_routes(
        [
            web.get("/v1/models", models),
            web.post("/v1/completions", completions),
            web.post("/tokenize", tokenize),
        ]
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("engine", ["auto", "generic"])
async def test_generic_engine_detected_or_named_stops_an_unverifiable_run(tmp_path, engine):
    async with tiny_server() as url:
        with pytest.raises(ColdUnverified, match="engine 'generic' has no reset") as err:
            await run(url, tmp_path / "stop", **{"target.engine": engine})
        assert ("detected as 'generic'" in err.value.message) == (engine == "auto")
        outcome = await run(url, tmp_path / "allowed", allow=True, **{"target.engine": engine})
    manifest = read_manifest(outcome.run_dir)
    assert outcome.exit_code == 0 and manifest["target"]["engine"] == "generic"
    assert manifest["cold_start"]["method"] == "salt" and manifest["cold_start"]["verified"] is None
    assert manifest["options"]["allow_unverified_cold"] is True


async def test_generic_engine_with_salt_only_by_choice_still_runs(tmp_path):
    async with tiny_server() as url:
        outcome = await run(url, tmp_path, **{"cache.reset": "never"})
    assert outcome.exit_code == 0


async def test_413_from_tokenize_is_one_line_exit_3(tmp_path):
    from kvbench.errors import PromptTooLarge

    async with tiny_server(tokenize_limit=2000) as url:
        with pytest.raises(PromptTooLarge) as err:
            await run(url, tmp_path / "api", allow=True, **{"prompts.lengths": [3000]})
        assert err.value.exit_code == 3
        assert "larger than what the server or a proxy in front of it accepts" in err.value.message
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kvbench", "run", "ttft", "--base-url", url, "--lengths", "3000",
            "--allow-unverified-cold", "--no-report", "-q", "--output-dir", str(tmp_path / "cli"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _out, err_bytes = await asyncio.wait_for(proc.communicate(), 120)
    lines = err_bytes.decode().strip().splitlines()
    assert proc.returncode == 3, lines
    assert len(lines) == 1 and "HTTP 413" in lines[0] and "internal error" not in lines[0]
