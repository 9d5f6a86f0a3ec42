"""The twin's compute factor (kvbench.twin.speed), fitted on loads the step model made."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.mock.costs.timing import ModelParams, derive_params
from kvbench.mock.profiles import load_profile, validate_profile
from kvbench.twin import closedloop, speed
from kvbench.twin.measure import Load, Request

REQUESTS = tuple(Request(4000, 0 if i < 8 else 3984, 16) for i in range(24))
LIMIT = 4


def _gpu(factor: float = 1.0) -> dict:
    d = load_profile("ci", {"time_scale": 1.0, "gpu.request_fixed_s": 0.005}).model_dump()
    # a twin's shape: prefill as a*n + b*n^2 (kvbench.twin.build._draft), steps of 2048 tokens
    d["gpu"] |= {"prefill_linear_s_per_token": 4e-5, "prefill_quadratic_s_per_token2": 8e-9}
    d["gpu"]["step"] = {"token_budget": 2048}
    return d | {"gpu": speed.scale(d["gpu"], factor)}


def _params(factor: float = 1.0) -> ModelParams:
    return derive_params(validate_profile(_gpu(factor), "test"))


def _loads(factor: float) -> list[Load]:
    """What a server `factor` times as slow as the fitted costs would have measured."""
    out = []
    for c in (2, 8):
        p = closedloop.predict(_params(factor), REQUESTS, c, LIMIT)
        out.append(Load(Path(f"run-{c}"), "cached", c, REQUESTS, p.requests_per_s, p.ttft_p50_s, 1.0))
    return out


def _predictor(load: Load, factor: float) -> tuple[float, float]:
    p = closedloop.predict(_params(factor), load.requests, load.concurrency, LIMIT)
    return p.requests_per_s, p.ttft_p50_s


def test_scale_slows_every_compute_cost_and_divides_the_rates() -> None:
    gpu = _gpu()["gpu"]
    slow = speed.scale(gpu, 2.0)
    timed = [k for k in speed.TIMES if gpu.get(k) is not None]
    assert len(timed) == len(speed.TIMES)
    for k in timed:
        assert slow[k] == pytest.approx(2 * gpu[k])
    assert slow["hbm_bandwidth_bytes_per_s"] == pytest.approx(gpu["hbm_bandwidth_bytes_per_s"] / 2)
    assert slow["max_num_seqs"] == gpu["max_num_seqs"] and gpu == _gpu()["gpu"]  # a copy


@pytest.mark.parametrize("truth", [0.7, 1.3])
def test_a_server_slower_or_faster_than_its_sweep_is_found(truth: float) -> None:
    got = speed.choose(_loads(truth), _predictor)
    assert got.origin == "model"
    assert got.value == pytest.approx(truth, rel=speed.STEP - 1)
    assert got.residual is not None and got.residual < 0.02
    assert len(got.points) == 2 and got.record()["value"] == pytest.approx(got.value)


def test_the_sweeps_own_speed_is_kept() -> None:
    got = speed.choose(_loads(1.0), _predictor)
    assert (got.value, got.origin) == (1.0, "default")
    assert "clearly better than 1" in got.detail


def test_no_throughput_runs_keep_the_sweeps_costs() -> None:
    got = speed.choose([], _predictor)
    assert (got.value, got.origin, got.points) == (1.0, "default", ())


def test_throughput_runs_on_the_sweeps_own_server_keep_its_costs(tmp_path: Path) -> None:
    from kvbench.twin.build import _params as profile_params
    from kvbench.twin.sources import RunData, Source, ThroughputPoint, TtftPoint

    def src(url: str) -> Source:
        return Source("vllm", "server", None, 1.0, "host", server=url)

    sweep = RunData(tmp_path / "sweep", "m", src("http://a"), cold=[TtftPoint(1000, 0, 0.1)])
    thr = RunData(
        tmp_path / "thr", "m", src("http://a"), throughput=[ThroughputPoint("cached", 8, 9.0, 0.2, 32)]
    )
    got = speed.fit_to_runs([sweep, thr], _gpu(), LIMIT, profile_params)
    assert (got.value, got.origin, got.detail) == (1.0, "default", speed.SAME_SERVER)
