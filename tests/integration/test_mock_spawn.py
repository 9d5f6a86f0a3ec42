"""spawned_mock: a child process that starts, restarts with G4 persisted, and leaves nothing behind."""

import asyncio
import os

import aiohttp

from kvbench.mock.spawn import spawned_mock


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def cached_tokens(session, base_url, prompt):
    async with session.post(base_url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}) as r:
        assert r.status == 200
        return (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"]


async def test_spawn_restart_with_persisted_g4_and_stop(tmp_path):
    persist = tmp_path / "g4"
    prompt = "persist-me " + "w " * 5_000
    pids = []
    async with spawned_mock("ci", persist_dir=persist, fabric_port=0) as mock, aiohttp.ClientSession() as s:
        assert mock.base_url.startswith("http://127.0.0.1:") and mock.profile_name == "ci"
        assert mock.fabric_address is not None
        pids.append(mock.pid)
        assert alive(mock.pid) and mock.pid != os.getpid()
        assert await cached_tokens(s, mock.base_url, prompt) == 0
        assert await cached_tokens(s, mock.base_url, prompt) > 4_900
        await mock.restart()
        pids.append(mock.pid)
        assert not alive(pids[0]) and alive(mock.pid)
        assert await cached_tokens(s, mock.base_url, prompt) > 4_900  # G4 persisted on disk
        async with s.post(mock.base_url + "/reset_prefix_cache") as r:
            assert (await r.json())["success"] is True
        assert await cached_tokens(s, mock.base_url, prompt) > 4_900  # plain reset keeps persisted G4
        async with s.post(mock.base_url + "/reset_prefix_cache?include_persistent=true") as r:
            assert (await r.json())["success"] is True
        assert await cached_tokens(s, mock.base_url, prompt) == 0
    await asyncio.sleep(0.05)
    assert not any(alive(p) for p in pids)


async def test_spawned_exit_after_requests(tmp_path):
    async with spawned_mock("ci", faults=["exit_after_requests=1"]) as mock, aiohttp.ClientSession() as s:
        assert await cached_tokens(s, mock.base_url, "one") == 0
        try:
            await cached_tokens(s, mock.base_url, "two")
        except aiohttp.ClientError:
            pass
        else:
            raise AssertionError("the mock should have exited")
        assert mock.process is not None
        assert await asyncio.wait_for(mock.process.wait(), 5) == 3
        pid = mock.pid
    assert not alive(pid)
