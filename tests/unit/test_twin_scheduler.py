"""The twin's scheduler (kvbench.twin.scheduler) and its range check (kvbench.report.twin.range)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvbench.mock.config import FitRecord
from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile, validate_profile
from kvbench.model.prefill import prefill_time
from kvbench.report.twin.range import expected_error, twin_prediction, warning_lines
from kvbench.twin.build import build_twin
from kvbench.twin.scheduler import ENGINE_DEFAULTS, choose
from kvbench.twin.sources import read_runs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "fixture_runs" / "20261130T140312Z-ttft-3f9a1c"
A, C, FIXED = 2.0e-5, 3.0e-10, 0.009


def _run(tmp_path: Path, engine: str, kind: str, profile: str | None = None) -> Path:
    d = tmp_path / f"run-{engine}"
    d.mkdir()
    m = json.loads((FIXTURE / "manifest.json").read_text())
    m["target"] |= {"engine": engine, "kind": kind, "mock_profile": profile}
    (d / "manifest.json").write_text(json.dumps(m))
    rows = [
        {"phase": "ttft", "label": "cold", "status": "ok", "prompt_tokens": n, "prompt_tokens_server": n,
         "cached_tokens": 0, "ttft_ms": (prefill_time(n, 0, A, C) + FIXED) * 1e3}
        for n in (2000, 8000, 16000, 32000)
    ]  # fmt: skip
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_a_llamacpp_twin_schedules_in_steps_with_its_fixed_cost(tmp_path: Path) -> None:
    twin = build_twin(read_runs([_run(tmp_path, "llamacpp", "server")]), "ibm-g4", None, None)
    gpu = twin.profile["gpu"]
    budget, slots = ENGINE_DEFAULTS["llamacpp"]
    assert gpu["step"] == {"token_budget": budget} and gpu["max_num_seqs"] == slots
    assert gpu["request_fixed_s"] == pytest.approx(FIXED, rel=1e-6)
    record = twin.profile["fit"]["terms"]["scheduler"]
    assert "engine default" in record["token_budget_from"] and record["request_fixed_s_from"].startswith(
        "fitted"
    )
    assert twin.profile["fit"]["source"]["engine"] == "llamacpp"
    params = derive_params(validate_profile(twin.profile))  # the mock takes it as is
    assert params.step is not None and params.step.token_budget == budget
    assert params.request_fixed_s == pytest.approx(FIXED, rel=1e-6)


def test_a_llamacpp_twin_caches_per_slot_and_a_vllm_twin_shares_its_cache(tmp_path: Path) -> None:
    llama = build_twin(read_runs([_run(tmp_path, "llamacpp", "server")]), "ibm-g4", None, None).profile
    assert llama["gpu"]["slot_cache"] == {"similarity": 0.1, "ram_tokens": None}
    tiers = llama["tiers"]
    assert [tiers[t]["enabled"] for t in ("G1", "G2", "G3", "G4")] == [True, True, False, False]
    assert any("llama.cpp's cache shape" in n for n in llama["fit"]["notes"])
    vllm = build_twin(read_runs([_run(tmp_path, "vllm", "server")]), "ibm-g4", None, None).profile
    assert vllm["gpu"].get("slot_cache") is None and vllm["tiers"]["G4"]["enabled"]


def test_given_values_win_and_are_recorded_as_given(tmp_path: Path) -> None:
    runs = read_runs([_run(tmp_path, "vllm", "server")])
    twin = build_twin(runs, "ibm-g4", None, None, step_budget=512, max_seqs=32)
    assert twin.profile["gpu"]["step"] == {"token_budget": 512} and twin.profile["gpu"]["max_num_seqs"] == 32
    record = twin.profile["fit"]["terms"]["scheduler"]
    assert record["token_budget_from"] == "given" and record["max_num_seqs_from"] == "given"


def test_a_twin_of_the_mock_keeps_processor_sharing_and_its_sequence_limit() -> None:
    s = choose("mock", "ci", 0.001, None, None, kind="mock")
    assert s.token_budget is None and s.gpu_fields()["step"] is None
    assert s.max_num_seqs == load_profile("ci").gpu.max_num_seqs
    assert "source profile ci" in s.origin["max_num_seqs"]


def test_an_unknown_engine_says_its_step_values_are_assumed() -> None:
    s = choose("sglang", None, 0.0, None, None)
    assert s.token_budget and "give --step-budget" in s.origin["token_budget"]


def test_a_vllm_twin_steps_a_whole_context_as_kvbench_serves_it() -> None:
    # engines serve passes --max-num-batched-tokens max(ctx, 8192): a 10240-token server steps 10240
    assert choose("vllm", None, 0.0, None, None, context=10240).token_budget == 10240
    assert choose("vllm", None, 0.0, None, None, context=4096).token_budget == ENGINE_DEFAULTS["vllm"][0]
    assert choose("vllm", None, 0.0, 512, None, context=10240).token_budget == 512  # given wins
    llama = choose("llamacpp", None, 0.0, None, None, context=10240)
    assert llama.token_budget == ENGINE_DEFAULTS["llamacpp"][0]


def _fit(**valid) -> FitRecord:
    return FitRecord(
        runs=["results/a"],
        terms={},
        valid={"prompt_tokens_min": 2000, "prompt_tokens_max": 16000, "cached_tokens_min": 1984,
               "cached_tokens_max": 15984, "concurrency_max": 1} | valid,
        source={"engine": "llamacpp", "machine": "host, 2 CPUs"},
        validation=[
            {"metric": "req/s", "error_pct": -6.0}, {"metric": "req/s", "error_pct": 12.5},
            {"metric": "TTFT p50 ms", "error_pct": 400.0, "other_system": True},
        ],
    )  # fmt: skip


def test_requests_outside_the_fitted_range_are_counted() -> None:
    df = pd.DataFrame(
        {
            "label": ["probe", "cached", "cached", "cached", "cached"],
            "status": ["ok", "ok", "ok", "ok", "error"],
            "prompt_tokens": [16, 3000, 20000, 40000, 90000],
            "prompt_tokens_server": [16, 3000, None, 40000, None],
            "cached_tokens": [0, 0, 19000, 2000, 0],
        }
    )
    pred = twin_prediction(_fit(), df, concurrency=4)
    assert pred is not None
    by = {e.what: e for e in pred.outside}
    # the probe and the failed request are not measurements; 20000 and 40000 are over 16000
    assert by["prompt tokens"].requests == 2 and by["prompt tokens"].seen == "20,000-40,000"
    assert by["cached tokens"].requests == 1 and by["cached tokens"].seen == "19,000-19,000"
    assert by["connections"].seen == "4" and by["connections"].fitted == "1-1"
    # a validation row of another system is not the twin's error
    assert pred.expected_error == {"req/s": 12.5}
    lines = warning_lines(pred)
    assert sum("an extrapolation" in line for line in lines) == 3 and "±12%" in lines[-1]


def test_a_run_inside_the_range_and_an_unvalidated_twin() -> None:
    df = pd.DataFrame({"label": ["cold"], "status": ["ok"], "prompt_tokens": [8000], "cached_tokens": [0]})
    fit = _fit().model_copy(update={"validation": []})
    pred = twin_prediction(fit, df, concurrency=1)
    assert pred is not None and pred.outside == []
    assert warning_lines(pred) == [
        "twin: predicted figures, never validated (kvbench fit PROFILE --validate RUN...)"
    ]
    assert twin_prediction(None, df, 1) is None
    assert expected_error([{"metric": "x", "error_pct": None}]) == {}


def test_a_mock_source_whose_profile_is_gone_still_shares_its_gpu() -> None:
    s = choose("mock", "no-such-profile", 0.002, None, None, kind="mock")
    assert s.token_budget is None and s.max_num_seqs == 256 and "unreadable" in s.origin["token_budget"]


def test_a_real_server_twin_records_its_speed_and_a_mock_twin_has_none(tmp_path: Path) -> None:
    server = build_twin(read_runs([_run(tmp_path, "vllm", "server")]), "ibm-g4", None, None).profile
    speed = server["fit"]["terms"]["speed"]
    assert (speed["value"], speed["origin"]) == (1.0, "default")  # no throughput runs to fit it to
    assert server["gpu"]["request_fixed_s"] == pytest.approx(FIXED, rel=1e-6)  # the sweep's, unscaled
    mock = build_twin(read_runs([_run(tmp_path, "mock", "mock", "ci")]), "ibm-g4", None, None).profile
    assert "speed" not in mock["fit"]["terms"]
