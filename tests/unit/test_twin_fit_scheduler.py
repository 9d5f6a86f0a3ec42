"""The twin's sequence limit from throughput runs (kvbench.twin.seqlimit, closedloop, measure).

The model path is checked on loads the step model itself measured with a known limit: the choice
must find that limit back, on the processor-sharing GPU and in steps, and say "not binding" where
the connections never reached it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvbench.mock.costs.timing import ModelParams, derive_params
from kvbench.mock.profiles import load_profile
from kvbench.twin import closedloop, seqlimit
from kvbench.twin.measure import Gauges, Load, Request, read_gauges

CONNECTIONS = (1, 2, 4, 8)
# the throughput test's shape, short: a first pass of cold prompts, then the same prompts warm
REQUESTS = tuple(Request(4000, 0 if i < 8 else 3984, 16) for i in range(24))


def _params(steps: bool) -> ModelParams:
    over = {"time_scale": 1.0, "gpu.request_fixed_s": 0.005} | (
        {"gpu.step": {"token_budget": 2048}} if steps else {}
    )
    return derive_params(load_profile("ci", over))


def _loads(params: ModelParams, limit: int | None, noise: float = 0.0, seed: int = 0) -> list[Load]:
    rng = np.random.default_rng(seed)
    out = []
    for c in CONNECTIONS:
        p = closedloop.predict(params, REQUESTS, c, limit)
        jitter = rng.normal(1.0, noise, 2) if noise else (1.0, 1.0)
        out.append(Load(Path(f"run-{c}"), "cached", c, REQUESTS, p.requests_per_s * jitter[0],
                        p.ttft_p50_s * jitter[1], 1.0))  # fmt: skip
    return out


def _predictor(params: ModelParams) -> seqlimit.Predictor:
    def predict(load: Load, limit: int | None) -> tuple[float, float]:
        p = closedloop.predict(params, load.requests, load.concurrency, limit)
        return p.requests_per_s, p.ttft_p50_s

    return predict


@pytest.mark.parametrize("steps", [False, True], ids=["processor-sharing", "steps"])
@pytest.mark.parametrize("truth", [2, 3, 4])
def test_the_model_finds_the_limit_the_step_model_ran_with(steps: bool, truth: int) -> None:
    params = _params(steps)
    got = seqlimit.choose(_loads(params, truth), _predictor(params), prior=256, prior_from="source profile")
    assert (got.value, got.origin, got.binding) == (truth, "model", True)
    assert got.residual == pytest.approx(0.0, abs=1e-9)
    assert [p.concurrency for p in got.points] == list(CONNECTIONS)
    assert got.scores[str(truth)] < got.scores["none"]


def test_the_model_holds_its_choice_through_measurement_noise() -> None:
    params = _params(steps=False)
    for seed in range(3):
        loads = _loads(params, 4, noise=0.02, seed=seed)
        got = seqlimit.choose(loads, _predictor(params), prior=256, prior_from="source profile")
        assert (got.value, got.origin) == (4, "model"), (seed, got.scores)
        assert got.residual is not None and 0 < got.residual < 0.1


def test_no_limit_binding_keeps_the_prior_or_unbounds_it() -> None:
    params = _params(steps=True)
    loads = _loads(params, None)
    kept = seqlimit.choose(loads, _predictor(params), prior=16, prior_from="engine default")
    assert (kept.value, kept.origin, kept.binding) == (16, "default", False)
    assert "no limit binding up to 8 connection(s)" in kept.detail and "engine default" in kept.detail
    # a prior the runs contradict (4 sequences, yet 8 connections ran unqueued) gives way
    lifted = seqlimit.choose(loads, _predictor(params), prior=4, prior_from="engine default")
    assert (lifted.value, lifted.origin, lifted.binding) == (seqlimit.UNBOUNDED, "model", False)


def test_a_prior_the_runs_cannot_tell_from_no_limit_stays() -> None:
    # vLLM CPU at 2 and 8 connections on 2 cores: its limit of 4 and none time within a few percent
    # (compute is the queue either way), and an invented 256 then let 28 duplicates miss at once
    loads = _loads(_params(steps=True), 4)

    def near(load: Load, limit: int | None) -> tuple[float, float]:
        off = {None: 1.075, 4: 1.08}.get(limit, 1.5)
        return load.requests_per_s * off, load.ttft_p50_s / off

    got = seqlimit.choose(loads, near, prior=4, prior_from="engine default (vllm)")
    assert (got.value, got.origin, got.binding) == (4, "default", True)
    assert "clearly better than 4" in got.detail and "engine default (vllm)" in got.detail
    # the same runs, where no limit fits clearly better: the prior gives way (as above)
    far = seqlimit.choose(loads, lambda ld, lim: near(ld, lim) if lim else (ld.requests_per_s, ld.ttft_p50_s),
                          prior=4, prior_from="engine default (vllm)")  # fmt: skip
    assert (far.value, far.binding) == (seqlimit.UNBOUNDED, False)


def test_without_throughput_runs_the_prior_stays() -> None:
    got = seqlimit.choose([], _predictor(_params(False)), prior=4, prior_from="engine default (llamacpp)")
    assert (got.value, got.origin, got.residual, got.points) == (4, "default", None, ())
    assert got.record()["origin"] == "default"


def test_gauges_that_saw_a_queue_give_the_limit_and_given_beats_them() -> None:
    params = _params(steps=False)
    loads = _loads(params, 4)
    gauges = Gauges("vllm:num_requests_running", max_running=4, saw_waiting=True, samples=30)
    got = seqlimit.choose(loads, _predictor(params), 256, "source profile", gauges=gauges)
    assert (got.value, got.origin, got.binding) == (4, "gauges", True)
    assert got.residual == pytest.approx(0.0, abs=1e-9) and not got.scores  # no candidates tried
    given = seqlimit.choose(loads, _predictor(params), 256, "source profile", given=2, gauges=gauges)
    assert (given.value, given.origin) == (2, "given") and given.residual is not None and given.residual > 0.1


def test_gauges_the_timing_refutes_are_lag_and_the_model_decides() -> None:
    # vLLM CPU's gauges, sampled once a second, showed 1 running and 3 waiting at 8 connections on a
    # server of 4 sequences: a limit of 1 the runs' own timing fits far worse than the prior 4
    params = _params(steps=True)
    loads = _loads(params, 4)
    lagging = Gauges("vllm:num_requests_running", max_running=1, saw_waiting=True, samples=6)
    got = seqlimit.choose(loads, _predictor(params), 4, "engine default (vllm)", gauges=lagging)
    assert (got.value, got.origin) == (4, "model") and got.scores["4"] < got.scores["1"]
    # gauges the timing does not refute still give the limit, even where the prior differs
    honest = Gauges("vllm:num_requests_running", max_running=4, saw_waiting=True, samples=6)
    kept = seqlimit.choose(loads, _predictor(params), 2, "engine default (vllm)", gauges=honest)
    assert (kept.value, kept.origin) == (4, "gauges")


def test_gauges_without_a_queue_are_a_floor_for_the_model() -> None:
    params = _params(steps=False)
    loads = _loads(params, 2)
    floor = Gauges("vllm:num_requests_running", max_running=3, saw_waiting=False, samples=5)
    got = seqlimit.choose(loads, _predictor(params), 256, "source profile", gauges=floor)
    assert got.origin == "model" and got.value >= 3 and "2" not in got.scores


def test_read_gauges_sums_labels_per_scrape_and_sees_the_queue(tmp_path: Path) -> None:
    rows = []
    for t, (a, b, waiting) in enumerate([(1, 1, 0), (2, 2, 3), (1, 0, 0)]):
        for model, running in (("m1", a), ("m2", b)):
            rows.append({"t_ns": t, "phase": "cached", "name": "vllm:num_requests_running",
                         "labels": {"model_name": model}, "value": running})  # fmt: skip
        rows.append(
            {
                "t_ns": t,
                "phase": "cached",
                "name": "vllm:num_requests_waiting",
                "labels": {},
                "value": waiting,
            }
        )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert read_gauges([tmp_path]) == Gauges("vllm:num_requests_running", 4, True, 3)
    assert read_gauges([tmp_path / "nowhere"]) is None


def test_a_limit_of_one_serialises_the_load_but_its_front_end() -> None:
    params = _params(steps=True)
    alone = closedloop.predict(params, REQUESTS, 1, None)
    queued = closedloop.predict(params, REQUESTS, 4, 1)
    assert queued.max_running == 1
    # a step twin pays the fixed cost before it queues (the server's front end): with others
    # waiting, every request's but the first overlaps the one running sequence
    n, fixed = len(REQUESTS), params.request_fixed_s
    assert n / queued.requests_per_s == pytest.approx(n / alone.requests_per_s - (n - 1) * fixed, rel=1e-9)
    assert queued.ttft_p50_s > 2 * alone.ttft_p50_s  # three requests queued ahead of most
    assert closedloop.predict(params, REQUESTS, 8, None).max_running == 8


def test_candidates_lie_below_the_most_connections() -> None:
    assert seqlimit.candidates(8) == [1, 2, 3, 4, 5, 6, 7]
    assert seqlimit.candidates(8, floor=3) == [3, 4, 5, 6, 7]
    assert seqlimit.candidates(1) == []
    assert seqlimit.candidates(300)[-3:] == [64, 128, 256]


def test_a_mock_sources_own_limit_is_kept_where_the_model_would_invent_one() -> None:
    # loads made with a limit of 3 stand for a replay that mismatches the source's timing: the model
    # path picks 3, but a mock source's profile says its limit exactly, so that stays (scored all the same)
    params = _params(steps=False)
    loads = _loads(params, 3)
    assert seqlimit.choose(loads, _predictor(params), 256, "source profile ci").value == 3
    got = seqlimit.choose(loads, _predictor(params), 256, "source profile ci", exact_prior=True)
    assert (got.value, got.origin, got.binding) == (256, "source", False)
    assert got.scores["3"] < got.scores["none"]
    given = seqlimit.choose(loads, _predictor(params), 256, "source profile ci", given=2, exact_prior=True)
    assert given.value == 2
