"""Time slices (kvbench.report.slices.frame) on hand-made rows: every column from numbers by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvbench.engines.adapters import get_adapter
from kvbench.report.slices.frame import (
    PhaseSpan,
    Sizes,
    auto_slice,
    build_slices,
    counter_rise,
    onboard_vs_ttft,
)

S = 1_000_000_000  # one second in ns


def req(i: int, sent_s: float, ttft_ms: float, end_s: float, cached: int, prompt: int = 1000, **kw):
    first = int(sent_s * S + ttft_ms * 1e6)
    row = {
        "request_id": f"r{i}",
        "phase": kw.pop("phase", "cached"),
        "label": kw.pop("label", "cached"),
        "status": kw.pop("status", "ok"),
        "sent_ns": int(sent_s * S),
        "first_token_ns": first,
        "end_ns": int(end_s * S),
        "ttft_ms": ttft_ms,
        "cached_tokens": cached,
        "prompt_tokens": prompt,
        "noise_active": kw.pop("noise_active", False),
    }
    row.update(kw)
    return row


def sample(t_s: float, name: str, value: float, **labels: str):
    return {"t_ns": int(t_s * S), "phase": "cached", "name": name, "labels": labels, "value": value}


def test_a_counter_rises_along_the_line_through_its_samples_and_a_reset_counts_from_zero():
    t = np.array([0.0, 1.0, 2.0, 3.0]) * S
    v = np.array([100.0, 200.0, 50.0, 150.0])  # restarted between 1 s and 2 s: it counted 50 since
    edges = np.array([0.0, 0.5, 1.5, 3.0]) * S
    rise = counter_rise(t, v, edges)
    # cumulative rises: 0, 100, 150, 250 at 0, 1, 2, 3 s -> at 0.5 s 50, at 1.5 s 125, at 3 s 250
    assert rise == pytest.approx([50.0, 75.0, 125.0])
    assert counter_rise(np.array([]), np.array([]), edges).tolist() == [0.0, 0.0, 0.0]


def test_slices_from_hand_made_rows():
    requests = pd.DataFrame(
        [
            req(0, 0.0, 0.0, 0.1, 0, label="probe", phase="probe"),  # probes never count
            req(1, 0.1, 400.0, 0.6, 0),
            req(2, 0.2, 100.0, 0.9, 900),
            req(3, 1.1, 20.0, 1.5, 1000, noise_active=True),
            req(4, 1.2, 30.0, 1.8, 500, noise_active=True),
            req(5, 1.3, 10.0, 1.7, 0, status="error", noise_active=True),
        ]
    )
    metrics = [
        *(sample(t, "vllm:prefix_cache_queries_total", q) for t, q in ((0, 0), (1, 2000), (2, 4000))),
        *(sample(t, "vllm:prefix_cache_hits_total", h) for t, h in ((0, 0), (1, 900), (2, 2400))),
        *(
            sample(t, "kvbench_mock_onboard_bytes_total", b, tier="G4", model_name="m")
            for t, b in ((0, 0), (1, 2e9), (2, 2e9 + 6e9))
        ),
        *(sample(t, "vllm:num_requests_waiting", q) for t, q in ((0.2, 1), (0.7, 3), (1.5, 0))),
    ]
    telemetry = [
        *(
            {
                "t_ns": int(t * S),
                "kind": "host",
                "source": "host",
                "name": n,
                "labels": {"device": "eth0"},
                "value": v,
            }
            for t, n, v in (
                (0, "node_network_receive_bytes_total", 0),
                (2, "node_network_receive_bytes_total", 4e9),
                (0, "node_disk_read_bytes_total", 0),
                (2, "node_disk_read_bytes_total", 1e9),
            )
        ),
        *(
            {
                "t_ns": int(t * S),
                "kind": "dcgm",
                "source": "x",
                "name": "DCGM_FI_DEV_GPU_UTIL",
                "labels": {"gpu": g},
                "value": u,
            }
            for t, g, u in ((0.5, "0", 80), (0.5, "1", 40), (1.5, "0", 100), (1.5, "1", 100))
        ),
        {
            "t_ns": int(1.4 * S),
            "kind": "node",
            "source": "http://down:9100/metrics",
            "error": "cannot reach it",
        },
    ]
    truth = [
        {"request_id": "r3", "bytes_from_tier": {"G2": 0.0, "G3": 0.0, "G4": 3e9}},
        {"request_id": "r4", "bytes_from_tier": {"G2": 1e9, "G3": 0.0, "G4": 0.0}},
    ]
    phases = [PhaseSpan("cached", 0, 1 * S), PhaseSpan("noisy", 1 * S, 2 * S, noisy=True)]
    df = build_slices(requests, metrics, telemetry, truth, phases, get_adapter("mock"), slice_s=1.0)
    assert df["t_s"].tolist() == [0.0, 1.0]
    assert df["phase"].tolist() == ["cached", "noisy"] and df["noisy"].tolist() == [False, True]
    assert df["requests_per_s"].tolist() == [2.0, 2.0]
    assert df["errors_per_s"].tolist() == [0.0, 1.0]
    assert df["ttft_p50_ms"].tolist() == pytest.approx([250.0, 25.0])
    assert df["ttft_p99_ms"][0] == pytest.approx(100 + 0.99 * 300)
    assert df["cached_ratio"].tolist() == pytest.approx([900 / 2000, 1500 / 2000])
    assert df["hit_ratio"].tolist() == pytest.approx([900 / 2000, 1500 / 2000])
    assert df["onboard_G4_gb_s"].tolist() == pytest.approx([2.0, 6.0])
    assert df["gt_onboard_G4_gb_s"].tolist() == pytest.approx([0.0, 3.0])
    assert df["gt_onboard_G2_gb_s"].tolist() == pytest.approx([0.0, 1.0])
    assert df["queue"].tolist() == pytest.approx([2.0, 0.0])
    assert df["host_net_rx_gb_s"].tolist() == pytest.approx([2.0, 2.0])
    assert df["host_disk_read_gb_s"].tolist() == pytest.approx([0.5, 0.5])
    assert df["gpu_util_pct"].tolist() == pytest.approx([60.0, 100.0])
    assert df["scrape_errors"].tolist() == [0, 1]

    scatter = onboard_vs_ttft(requests, truth)
    assert scatter.set_index("request_id")["onboard_gb"].to_dict() == pytest.approx({"r3": 3.0, "r4": 1.0})


def test_blocks_become_gb_s_only_when_the_block_is_sized():
    metrics = [sample(t, "kvbm_onboard_blocks_h2d", b) for t, b in ((0, 0), (2, 1000))]
    requests = pd.DataFrame([req(1, 0.0, 10.0, 2.0, 0)])
    phases = [PhaseSpan("cached", 0, 2 * S)]
    adapter = get_adapter("dynamo")
    blocks = build_slices(requests, metrics, [], [], phases, adapter, slice_s=1.0)
    assert blocks["onboard_G2_blocks_per_s"].tolist() == pytest.approx([500.0, 500.0])
    sized = build_slices(
        requests, metrics, [], [], phases, adapter, slice_s=1.0, sizes=Sizes(block_bytes=2e6)
    )
    assert sized["onboard_G2_gb_s"].tolist() == pytest.approx([1.0, 1.0])
    assert not any(c.endswith("blocks_per_s") for c in sized.columns)


def test_slice_width_is_round_and_never_under_two_scrapes():
    assert auto_slice(9.0) == 0.5
    assert auto_slice(9.0, interval_s=1.0) == 2.0
    assert auto_slice(3600.0) == 120.0
    assert auto_slice(80.0, interval_s=0.1, shortest_phase_s=0.45) == 0.2  # half-second ABBA phases
    empty = build_slices(pd.DataFrame(columns=["label", "sent_ns"]), [], [], [], [], get_adapter("mock"))
    assert empty.empty
