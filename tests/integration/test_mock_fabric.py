"""Noise on the mock's fabric port slows G4 onboarding only through the topology's links.

laptop with G4 only: one 2k-token prefix (268 MB modelled) reads from G4 in ~0.22 model s over its
one 1.25 GB/s link, which the noise also crosses; one noise flow beside one read takes half of it
(max-min fair per flow), whatever it offers.
"""

import asyncio
import json

import aiohttp

from kvbench.mock.api.server import MockServer

OVERRIDES = {
    "tiers.G1.enabled": False,
    "tiers.G2.enabled": False,
    "tiers.G3.enabled": False,
    "time_scale": 0.2,
    "fabric.noise_scale": 100.0,
}


async def _noise(host, port, stop: asyncio.Event, header: bytes = b"", chunk_bytes: int = 1 << 20):
    _, writer = await asyncio.open_connection(host, port)
    chunk = b"\0" * chunk_bytes
    try:
        if header:
            writer.write(header)
        while not stop.is_set():
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(0.01)
    finally:
        writer.close()


async def _quiet_then_noisy(tmp_path, header: bytes = b"", chunk_bytes: int = 1 << 20):
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
        noise = asyncio.create_task(_noise(*srv.fabric_address, stop, header, chunk_bytes))
        try:
            await asyncio.sleep(0.7)  # the sink's window sees the flow
            assert await req("noisy") > 0
        finally:
            stop.set()
            await noise
        async with s.get(srv.base_url + "/metrics") as r:
            metrics = await r.text()
    rows = {r["request_id"]: r for r in map(json.loads, gt.read_text().splitlines())}
    return rows["quiet"], rows["noisy"], metrics


async def test_undeclared_noise_is_its_real_bytes_times_the_scale_and_takes_its_fair_share(tmp_path):
    quiet, noisy, metrics = await _quiet_then_noisy(tmp_path)
    assert quiet["tokens_from_tier"]["G4"] > 0 and noisy["tokens_from_tier"]["G4"] > 0
    assert quiet["fabric_noise_bytes_per_s"] == 0 and quiet["noise_flows"] == 0
    assert noisy["noise_flows"] == 1 and noisy["noise_link"] == "fabric"
    # ~50 MB/s real x 100 offered, far beyond the link: it achieves its fair half, no more
    assert noisy["noise_offered_bytes_per_s"] > 1.25e9
    assert noisy["fabric_noise_bytes_per_s"] <= noisy["fabric_capacity_bytes_per_s"] == 1.25e9
    assert noisy["g4_link_bytes_per_s"] < 0.6 * quiet["g4_link_bytes_per_s"]
    assert noisy["onboard_ms"] > 1.5 * quiet["onboard_ms"]  # 1.2 GB/s alone, 0.625 GB/s shared
    total = [ln for ln in metrics.splitlines() if ln.startswith("kvbench_mock_fabric_noise_bytes_total")]
    assert float(total[0].split()[-1]) > 1e8


async def test_a_declared_flow_is_modelled_at_its_offered_rate_whatever_its_real_bytes(tmp_path):
    # 4 KB every 10 ms (~0.4 MB/s real) declaring 10 GB/s: the model takes the declared rate
    quiet, noisy, _ = await _quiet_then_noisy(tmp_path, b"KVBNOISE 1e10\n", chunk_bytes=4096)
    assert noisy["noise_flows"] == 1 and noisy["noise_offered_bytes_per_s"] == 1e10
    assert noisy["fabric_noise_bytes_per_s"] == 1.25e9 / 2  # its max-min share beside one read
    assert noisy["g4_link_bytes_per_s"] == 1.25e9 / 2 and quiet["g4_link_bytes_per_s"] == 1.2e9
