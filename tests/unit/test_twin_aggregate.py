"""The serving tier's aggregate bandwidth (kvbench.twin.aggregate), on loads the replay made with a
known aggregate: the choice must find it back, and keep one read's bandwidth where sharing is true."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.mock.costs.timing import ModelParams, derive_params
from kvbench.mock.profiles import load_profile
from kvbench.twin import aggregate, closedloop
from kvbench.twin.measure import Load, Request

BW = 2.0e9  # one read's bandwidth: slow enough that reads of 4000-token hits overlap under load
# a first pass of cold prompts, then the same prompts warm, as the throughput test runs them
REQUESTS = tuple(Request(4000, 0 if i < 8 else 3984, 4) for i in range(40))


def _params(multiple: float) -> ModelParams:
    over = {
        "time_scale": 1.0,
        "fabric.topology": None,
        "fabric.capacity_bytes_per_s": 1e15,
        "tiers.G4.read_bandwidth_bytes_per_s": BW,
        "tiers.G4.latency_s": 0.001,
        "tiers.G4.aggregate_bandwidth_bytes_per_s": multiple * BW,
    }
    return derive_params(load_profile("ci", over))


def _loads(multiple: float) -> list[Load]:
    out = []
    for c in (2, 8):
        p = closedloop.predict(_params(multiple), REQUESTS, c, None)
        out.append(Load(Path(f"run-{c}"), "cached", c, REQUESTS, p.requests_per_s, p.ttft_p50_s, 1.0))
    return out


def _predictor(load: Load, multiple: float) -> tuple[float, float]:
    p = closedloop.predict(_params(multiple), load.requests, load.concurrency, None)
    return p.requests_per_s, p.ttft_p50_s


@pytest.mark.parametrize("truth", [1, 2, 4])
def test_the_aggregate_the_loads_were_made_with_is_found(truth: int) -> None:
    got = aggregate.choose(_loads(truth), _predictor)
    assert got is not None and got.at_least == truth, got
    assert got.scores[truth] == pytest.approx(0.0, abs=1e-12)
    # the kept multiple reproduces the loads too: the largest the runs cannot tell from the truth
    assert got.scores[got.multiple] == pytest.approx(0.0, abs=1e-12)
    assert (got.multiple == 1) == (truth == 1)
    if truth > 1:  # where reads do not share, one read's bandwidth mispredicts the loads
        assert got.scores[1] > 0 and got.scores[truth // 2] > 0
    assert got.record()["at_least"] == truth


def test_without_load_past_one_connection_nothing_is_chosen() -> None:
    one = [Load(Path("run-1"), "cached", 1, REQUESTS, 10.0, 0.01, 1.0)]
    assert aggregate.choose(one, _predictor) is None
