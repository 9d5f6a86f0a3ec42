"""The G4 connector against a fake llama-server: miss -> save, hit -> restore, erase -> G4 emptied."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from kvbench.lab.connector import G4Connector, metrics_text, prompt_key, slot_file


def fake_llama(slot_dir: Path, calls: list[tuple[str, Any]]) -> web.Application:
    """Just enough of llama-server: slot save/restore/erase to files, a streamed completion."""
    held: dict[int, str] = {}

    async def slots(request: web.Request) -> web.Response:
        slot, action = int(request.match_info["id"]), request.query["action"]
        body = await request.json() if request.can_read_body else {}
        calls.append((action, slot))
        if action == "save":
            await asyncio.sleep(0.05)  # a write over the link takes time
            (slot_dir / body["filename"]).write_text(held.get(slot, ""))
            return web.json_response({"n_written": 4096})
        if action == "restore":
            held[slot] = (slot_dir / body["filename"]).read_text()
            return web.json_response({"n_read": 4096})
        held.pop(slot, None)
        return web.json_response({"n_erased": 1})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        slot = body["id_slot"]
        cached = 1 if held.get(slot) == body["prompt"] else 0
        held[slot] = body["prompt"]
        calls.append(("complete", slot))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for word in ("a", "b"):
            await resp.write(f"data: {json.dumps({'text': word, 'cached': cached})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="llamacpp:prompt_tokens_total 1\n")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    app = web.Application()
    app.router.add_post("/slots/{id}", slots)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    return app


async def test_connector_round_trip(tmp_path: Path) -> None:
    calls: list[tuple[str, Any]] = []
    upstream = TestServer(fake_llama(tmp_path, calls))
    await upstream.start_server()
    conn = G4Connector(str(upstream.make_url("/")).rstrip("/"), tmp_path, slots=2)
    front = TestServer(conn.app())
    await front.start_server()
    try:
        async with aiohttp.ClientSession() as s:

            async def complete(prompt: str) -> list[dict[str, Any]]:
                async with s.post(
                    front.make_url("/v1/completions"), json={"prompt": prompt, "stream": True}
                ) as r:
                    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
                    text = await r.text()
                return [json.loads(ln[6:]) for ln in text.splitlines() if ln.startswith("data: {")]

            first = await complete("hello")
            assert [c["text"] for c in first] == ["a", "b"] and first[0]["cached"] == 0
            # written through before the answer ended
            assert (tmp_path / slot_file(prompt_key({"prompt": "hello"}) or "")).exists()
            assert [a for a, _ in calls] == ["complete", "save"]
            calls.clear()
            second = await complete("hello")
            assert second[0]["cached"] == 1  # the KV came back from G4
            assert [a for a, _ in calls] == ["restore", "complete"]
            async with s.get(front.make_url("/metrics")) as r:
                text = await r.text()
            assert "llamacpp:prompt_tokens_total 1" in text
            assert "kvbench_lab_g4_hits_total 1" in text and "kvbench_lab_g4_misses_total 1" in text
            async with s.post(front.make_url("/slots/0?action=erase")) as r:
                assert r.status == 200
            assert not list(tmp_path.glob("kvlab-*.kv"))  # a reset empties G4 too: cold stays cold
            calls.clear()
            await complete("hello")
            assert [a for a, _ in calls] == ["complete", "save"]
            async with s.get(front.make_url("/v1/models")) as r:
                assert (await r.json())["data"][0]["id"] == "m"  # everything else passes through
    finally:
        await front.close()
        await upstream.close()


def test_prompt_key() -> None:
    assert prompt_key({"prompt": "x"}) == prompt_key({"prompt": "x", "max_tokens": 3})
    assert prompt_key({"prompt": "x"}) != prompt_key({"prompt": "y"})
    assert prompt_key({"messages": [{"role": "user", "content": "x"}]}) is not None
    assert prompt_key({"max_tokens": 1}) is None


def test_metrics_text_is_prometheus_counters() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    fams = {
        f.name: f for f in text_string_to_metric_families(metrics_text({"hits": 2.0, "restore_bytes": 5.0}))
    }
    hits = fams["kvbench_lab_g4_hits"]  # the parser names a counter's family without _total
    assert hits.type == "counter"
    assert (hits.samples[0].name, hits.samples[0].value) == ("kvbench_lab_g4_hits_total", 2.0)


async def test_same_prompt_at_once_computes_once_and_reset_waits(tmp_path: Path) -> None:
    calls: list[tuple[str, Any]] = []
    upstream = TestServer(fake_llama(tmp_path, calls))
    await upstream.start_server()
    conn = G4Connector(str(upstream.make_url("/")).rstrip("/"), tmp_path, slots=2)
    front = TestServer(conn.app())
    await front.start_server()
    try:
        async with aiohttp.ClientSession() as s:

            async def complete() -> str:
                async with s.post(front.make_url("/v1/completions"), json={"prompt": "p"}) as r:
                    return await r.text()

            await asyncio.gather(complete(), complete())
            # the second waited for the first's write-through, then read it from G4
            assert [a for a, _ in calls] == ["complete", "save", "restore", "complete"]
            assert conn.stats["hits"] == 1 and conn.stats["misses"] == 1
            calls.clear()
            await s.post(front.make_url("/slots/0?action=erase"))
            await complete()  # a miss again, and its write-through is pending ...
            async with s.post(front.make_url("/slots/1?action=erase")) as r:
                assert r.status == 200
            assert not list(tmp_path.glob("kvlab-*.kv"))  # ... the reset waited for it, then cleared
    finally:
        await front.close()
        await upstream.close()
