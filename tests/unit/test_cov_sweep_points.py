"""A sweep point's figures from its rows: the label it is judged on, the hit ratio, the mock's
modelled TTFT from its ground truth, and the offload-on-but-idle arm's overhead as a ratio of
medians, each worked out by hand on hand-written run directories."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvbench.configfile import Raw
from kvbench.errors import UsageError
from kvbench.mock.config import offload_off_overrides as mock_offload_off
from kvbench.sweep.arms import (
    arm_overhead,
    baseline_overrides,
    baseline_plan,
    offload_off_overrides,
)
from kvbench.sweep.points import hit_ratio, measured_label, measured_rows, modelled_ttft


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_measured_label_prefers_the_published_reading() -> None:
    rows = [{"label": "cold"}] * 5 + [{"label": "warm"}] + [{"label": "probe"}] * 9
    assert measured_label(rows) == "warm"  # preferred over the more numerous cold rows
    rows = [{"label": "cached"}, {"label": "quiet"}, {"label": "warm"}]
    assert measured_label(rows) == "cached"  # the first of the preference order present
    rows = [{"label": "baseline"}] * 2 + [{"label": "other"}] + [{"label": "fill"}] * 5
    assert measured_label(rows) == "baseline"  # else the most common measured one
    assert measured_label([{"label": "probe"}, {"label": "filler"}]) is None


def test_hit_ratio_is_token_weighted_over_ok_rows() -> None:
    rows = [
        {"status": "ok", "cached_tokens": 900, "prompt_tokens": 1000},
        {"status": "ok", "cached_tokens": 0, "prompt_tokens_server": 3000, "prompt_tokens": 1},
        {"status": "error", "cached_tokens": 5000, "prompt_tokens": 5000},  # failed: left out
        {"status": "ok", "prompt_tokens": 4000},  # no cached count: left out
    ]
    # 900 of 4000 prompt tokens (the server's count wins where it gave one)
    assert hit_ratio(rows) == pytest.approx(900 / 4000)
    assert hit_ratio([]) is None
    assert hit_ratio([{"status": "ok", "cached_tokens": 0, "prompt_tokens": 0}]) is None


def test_measured_rows_leave_out_probes(tmp_path: Path) -> None:
    _write(
        tmp_path / "requests.jsonl",
        [
            {"phase": "probe", "label": "warm", "request_id": 0},
            {"phase": "ttft", "label": "warm", "request_id": 1},
            {"phase": "ttft", "label": "cold", "request_id": 2},
        ],
    )
    label, rows = measured_rows(tmp_path, None)
    assert label == "warm" and [r["request_id"] for r in rows] == [1]
    label, rows = measured_rows(tmp_path, "cold")
    assert label == "cold" and [r["request_id"] for r in rows] == [2]


class _Params:
    """A model with prefill 1 ms per computed token and onboarding 2 ms per MB read."""

    def prefill_s(self, n: int, cached: int) -> float:
        return (n - cached) * 1e-3

    def onboard_s(self, by_tier: dict[str, int]) -> float:
        return sum(by_tier.values()) / 1e6 * 2e-3


def test_modelled_ttft_from_the_ground_truth(tmp_path: Path) -> None:
    _write(
        tmp_path / "mock_ground_truth.jsonl",
        [
            {"request_id": 1, "status": "ok", "prompt_tokens": 100, "cached_tokens": 60,
             "bytes_from_tier": {"G2": 1_000_000, "G4": 500_000}},
            {"request_id": 2, "status": "ok", "prompt_tokens": 50, "cached_tokens": 0},
            {"request_id": 3, "status": "ok", "prompt_tokens": 10, "cached_tokens": 0},  # not asked for
            {"request_id": 4, "status": "error", "prompt_tokens": 10, "cached_tokens": 0},
        ],
    )  # fmt: skip
    rows = [{"request_id": i, "status": "ok"} for i in (1, 2, 4)]
    # row 1: 40 computed tokens = 40 ms, 1.5 MB onboarded = 3 ms; row 2: 50 ms
    assert modelled_ttft(tmp_path, rows, _Params()) == pytest.approx([43.0, 50.0])
    assert modelled_ttft(tmp_path, rows, None) == []  # a real server: nothing modelled
    assert modelled_ttft(tmp_path / "nowhere", rows, _Params()) == []


def _arm(path: Path, ttfts: list[float]) -> Path:
    path.mkdir()
    _write(
        path / "requests.jsonl",
        [
            {"phase": "p", "label": "warm", "status": "ok", "ttft_ms": t, "request_id": i}
            for i, t in enumerate(ttfts)
        ]
        + [{"phase": "p", "label": "warm", "status": "error", "ttft_ms": 1e9, "request_id": 99}],
    )
    return path


def test_arm_overhead_is_the_ratio_of_medians_minus_one(tmp_path: Path) -> None:
    a = _arm(tmp_path / "a", [110.0, 120.0, 130.0, 125.0, 115.0])  # median 120
    b = _arm(tmp_path / "b", [100.0, 95.0, 105.0, 98.0, 102.0])  # median 100
    out = arm_overhead(a, b, "warm", (None, None))
    assert out["overhead_ttft_p50"] == pytest.approx(0.2)
    lo, hi = out["overhead_ttft_p50_ci"]
    assert lo <= 0.2 <= hi  # the interval holds the point estimate
    assert out["overhead_modelled_ttft_p50"] is None and out["overhead_modelled_ttft_p50_ci"] is None
    empty = _arm(tmp_path / "c", [])
    assert arm_overhead(a, empty, "warm", (None, None))["overhead_ttft_p50"] is None


def test_baseline_plan_and_its_overrides() -> None:
    assert baseline_plan(None, [], False) is None
    plan = baseline_plan("http://h:8000", ["load.concurrency=4"], False)
    assert plan is not None
    out = baseline_overrides(plan)
    assert out == {"load.concurrency": "4", "target.base_url": "http://h:8000"}
    assert isinstance(out["load.concurrency"], Raw)  # typed later, by the field it sets
    only_off = baseline_plan(None, [], True)
    assert only_off is not None and baseline_overrides(only_off) == {}


def test_offload_off_turns_off_every_lower_tier_of_the_embedded_mock() -> None:
    scn = SimpleNamespace(
        target=SimpleNamespace(base_url=None, mock_profile="ci", mock_overrides={"time_scale": 1})
    )
    out = offload_off_overrides(scn)["target.mock_overrides"]
    assert out == {"time_scale": 1, **mock_offload_off()}
    # offload off keeps the GPU prefix cache and turns only the lower tiers off
    assert mock_offload_off() == {
        "tiers.G1.enabled": True,
        "tiers.G2.enabled": False,
        "tiers.G3.enabled": False,
        "tiers.G4.enabled": False,
    }
    server = SimpleNamespace(
        target=SimpleNamespace(base_url="http://h", mock_profile="ci", mock_overrides={})
    )
    with pytest.raises(UsageError, match="--baseline-url"):
        offload_off_overrides(server)
