"""Each fault mode of the mock produces its described wire behaviour."""

import itertools
import json
import time

import aiohttp
import pytest

from kvbench.mock.api.server import MockServer

BODY = {"prompt": "fault test prompt", "max_tokens": 6, "stream": True}


async def raw_stream(session, url, body=BODY):
    """(status, list of (t, line)) read until the stream ends or breaks; error or None."""
    lines = []
    t0 = time.perf_counter()
    err = None
    async with session.post(url, json=body) as r:
        status = r.status
        buf = b""
        try:
            async for chunk in r.content.iter_any():
                buf += chunk
                *complete, buf = buf.split(b"\n")
                lines.extend((time.perf_counter() - t0, ln + b"\n") for ln in complete)
        except aiohttp.ClientError as exc:
            err = exc
    return status, lines, err


def content_lines(lines):
    return [ln for _, ln in lines if ln.startswith(b"data: {")]


async def run(faults, body=BODY, n=1):
    async with MockServer("ci", faults=faults) as srv, aiohttp.ClientSession() as s:
        url = srv.base_url + "/v1/completions"
        return [await raw_stream(s, url, body) for _ in range(n)]


async def test_error_rate_status():
    async with (
        MockServer("ci", faults=["error_rate=1", "error_status=503"]) as srv,
        aiohttp.ClientSession() as s,
        s.post(srv.base_url + "/v1/completions", json=BODY) as r,
    ):
        assert r.status == 503
        assert (await r.json())["error"]["code"] == 503


async def test_error_rate_fraction_is_seeded():
    async def statuses():
        async with (
            MockServer("ci", faults={"error_rate": 0.5, "seed": 7}) as srv,
            aiohttp.ClientSession() as s,
        ):
            out = []
            for _ in range(20):
                async with s.post(
                    srv.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}
                ) as r:
                    out.append(r.status)
            return out

    a = await statuses()
    assert set(a) == {200, 500}
    assert a == await statuses()


async def test_rate_limit():
    async with (
        MockServer("ci", faults=["rate_limit=1", "retry_after_s=3"]) as srv,
        aiohttp.ClientSession() as s,
        s.post(srv.base_url + "/v1/completions", json=BODY) as r,
    ):
        assert r.status == 429 and r.headers["Retry-After"] == "3"


async def test_close_after_tokens():
    ((status, lines, err),) = await run(["close_after_tokens=3"])
    assert status == 200
    assert len(content_lines(lines)) == 3
    assert not any(b"[DONE]" in ln for _, ln in lines)
    assert err is not None


async def test_close_after_tokens_every_second_request():
    results = await run(["close_after_tokens=1", "every=2"], n=2)
    assert any(b"[DONE]" in ln for _, ln in results[0][1])
    assert not any(b"[DONE]" in ln for _, ln in results[1][1])


async def test_bad_sse_line():
    ((_, lines, err),) = await run(["bad_sse"])
    bad = [ln for _, ln in lines if ln.strip() and not ln.startswith(b"data: ")]
    assert bad and err is None
    assert any(b"[DONE]" in ln for _, ln in lines)


async def test_bad_json_line():
    ((_, lines, _),) = await run(["bad_json"])
    broken = 0
    for ln in (ln for _, ln in lines if ln.startswith(b"data: ") and b"[DONE]" not in ln):
        try:
            json.loads(ln[6:])
        except ValueError:
            broken += 1
    assert broken == 1


async def test_stall_first_token():
    ((_, lines, _),) = await run(["stall_first_token_s=0.4"])
    assert content_lines(lines) and lines[0][0] >= 0.4


async def test_stall_mid_stream():
    ((_, lines, _),) = await run(["stall_mid_stream_s=0.4"])
    times = [t for t, ln in lines if ln.startswith(b"data: ")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) >= 0.4 and times[0] < 0.3


async def test_giant_chunk():
    ((_, lines, _),) = await run(["giant_chunk_bytes=5000000"])
    assert max(len(ln) for _, ln in lines) > 5_000_000


async def test_endless_stream_is_capped():
    t0 = time.perf_counter()
    ((_, lines, _),) = await run(["endless_stream", "endless_cap_s=0.5"])
    assert 0.5 <= time.perf_counter() - t0 < 5
    assert len(content_lines(lines)) > BODY["max_tokens"]
    assert any(b"[DONE]" in ln for _, ln in lines)


async def test_exit_after_requests_in_process_aborts_later_requests():
    async with MockServer("ci", faults=["exit_after_requests=1"]) as srv, aiohttp.ClientSession() as s:
        url = srv.base_url + "/v1/completions"
        async with s.post(url, json={"prompt": "x", "max_tokens": 1}) as r:
            assert r.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with s.post(url, json={"prompt": "x", "max_tokens": 1}) as r:
                await r.read()


async def test_non_streaming_faults():
    async with (
        MockServer("ci", faults=["bad_json"]) as srv,
        aiohttp.ClientSession() as s,
        s.post(srv.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as r,
    ):
        with pytest.raises(ValueError):
            json.loads(await r.read())
    async with MockServer("ci", faults=["close_after_tokens=1"]) as srv, aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            async with s.post(srv.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as r:
                await r.read()
