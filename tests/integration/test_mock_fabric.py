"""Real bytes on the mock's fabric port slow G4 onboarding through contention."""

import asyncio
import json

import aiohttp

from kvbench.mock.server import MockServer

# laptop with G4 only: one 2k-token prefix (268 MB modelled) reads from G4 in ~0.22 model s;
# the fabric (1.25 GB/s) is fully taken by >= 12.5 MB/s of real noise (noise_scale 100).
OVERRIDES = {
    "tiers.G1.enabled": False,
    "tiers.G2.enabled": False,
    "tiers.G3.enabled": False,
    "time_scale": 0.2,
    "fabric.noise_scale": 100.0,
}


async def _noise(host, port, stop: asyncio.Event):
    _, writer = await asyncio.open_connection(host, port)
    chunk = b"\0" * (1 << 20)
    try:
        while not stop.is_set():
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(0.01)
    finally:
        writer.close()


async def test_fabric_noise_slows_g4_reads(tmp_path):
    gt = tmp_path / "gt.jsonl"
    async with (
        MockServer("laptop", ground_truth=gt, fabric_port=0, profile_overrides=OVERRIDES) as srv,
        aiohttp.ClientSession() as s,
    ):
        assert srv.fabric_address is not None and srv.fabric_address[1] > 0
        url = srv.base_url + "/v1/completions"
        body = {"prompt": "fabric " + "w " * 2_000, "max_tokens": 1}

        async def req(rid):
            async with s.post(url, json=body, headers={"X-Request-Id": rid}) as r:
                assert r.status == 200
                return (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"]

        assert await req("cold") == 0
        assert await req("quiet") > 0
        stop = asyncio.Event()
        noise = asyncio.create_task(_noise(*srv.fabric_address, stop))
        try:
            await asyncio.sleep(0.7)  # the sink's measuring window fills
            assert await req("noisy") > 0
        finally:
            stop.set()
            await noise
        async with s.get(srv.base_url + "/metrics") as r:
            metrics = await r.text()
    rows = {r["request_id"]: r for r in map(json.loads, gt.read_text().splitlines())}
    quiet, noisy = rows["quiet"], rows["noisy"]
    assert quiet["tokens_from_tier"]["G4"] > 0 and noisy["tokens_from_tier"]["G4"] > 0
    assert quiet["fabric_noise_bytes_per_s"] == 0
    assert noisy["fabric_noise_bytes_per_s"] > 1.25e9
    assert noisy["onboard_ms"] > 3 * quiet["onboard_ms"]
    total = [ln for ln in metrics.splitlines() if ln.startswith("kvbench_mock_fabric_noise_bytes_total")]
    assert float(total[0].split()[-1]) > 1e9
