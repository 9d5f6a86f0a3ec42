"""kvbench.twin.validate and twin.measure on hand-written run directories: what each figure is computed
from, and how a failing child run or another system is reported (the child `kvbench run` is faked)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvbench.errors import UsageError
from kvbench.twin import validate as V
from kvbench.twin.measure import Gauges, read_gauges, read_load

FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "fixture_runs"
    / "written-by-2efe139"
    / "20261201T202113Z-throughput-35e13e"
)


def _phase(name: str, label: str, duration_s: float, rps: float | None) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "repetition": 0,
        "started_ns": 0,
        "ended_ns": int(duration_s * 1e9),
        "duration_s": duration_s,
        "requests": 0,
        "errors": 0,
        "cold_verified": True,
        "noise": None,
        "requests_ok_per_s": rps,
    }


def _run(
    tmp: Path,
    name: str,
    rows: list[dict[str, Any]],
    phases: list[dict[str, Any]],
    *,
    load: dict[str, Any] | None = None,
    engine: str = "mock",
    pace: float | None = None,
    scenario: str | None = None,
    metrics: list[dict[str, Any]] | None = None,
) -> Path:
    """A run directory: the fixture's manifest with these phases, load and target, and these rows."""
    m = json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))
    m["phases"] = phases
    m["load"] = load
    m["target"]["engine"] = engine
    m["target"]["mock_time_scale"] = pace
    d = tmp / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if scenario is not None:
        (d / "scenario.yaml").write_text(scenario, encoding="utf-8")
    if metrics is not None:
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics), encoding="utf-8")
    return d


def _row(phase: str, label: str, ttft_ms: float, n: int = 1000, cached: int = 0, **kw: Any) -> dict[str, Any]:
    row = {
        "phase": phase,
        "label": label,
        "status": "ok",
        "ttft_ms": ttft_ms,
        "prompt_tokens": n,
        "prompt_tokens_server": n,
        "cached_tokens": cached,
        "output_tokens": 16,
    }
    row.update(kw)
    return row


CONCURRENT = {
    "kind": "concurrent",
    "concurrency": 4,
    "requests": 8,
    "prompt_count": 4,
    "lengths": [1000],
    "max_tokens": 16,
}


# --- Row -----------------------------------------------------------------------------------------


def test_row_error_is_signed_relative_to_the_measured_value() -> None:
    assert V.Row("r", "cold", "m", 200.0, 150.0).error_pct == pytest.approx(-25.0)
    assert V.Row("r", "cold", "m", -4.0, -2.0).error_pct == pytest.approx(50.0)  # |measured| below
    assert V.Row("r", "cold", "m", 0.0, 1.0).error_pct is None
    assert V.Row("r", "cold", "m", None, 1.0).error_pct is None
    d = V.Row("r", "warm", "req/s", 3.0, 4.0, other_system=True).as_dict()
    assert d == {
        "run": "r",
        "label": "warm",
        "metric": "req/s",
        "measured": 3.0,
        "predicted": 4.0,
        "error_pct": 33.33,
        "other_system": True,
    }


def test_percentile_interpolates_and_skips_what_is_not_a_finite_number() -> None:
    assert V._pct([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert V._pct([10, None, float("nan"), "x", 30], 0.5) == pytest.approx(20.0)
    assert V._pct([5.0], 0.99) == 5.0
    assert V._pct([None, float("inf")], 0.5) is None


def test_table_lines_show_each_row_with_its_error_or_n_a() -> None:
    rows = [
        V.Row("/x/runs/abc", "cold", "TTFT p50 ms", 100.0, 110.0),
        V.Row("/x/runs/abc", "warm", "req/s", None, 2.0),
    ]
    head, first, second = V.table_lines(rows)
    assert head.split() == ["run", "label", "metric", "measured", "predicted", "error"]
    assert first.split()[:2] == ["abc", "cold"] and first.rstrip().endswith("+10.0%")
    assert second.split()[-3:] == ["n/a", "2", "n/a"]


# --- figures / compare ---------------------------------------------------------------------------


def test_figures_per_label_skip_probes_and_fillers_and_divide_by_the_phase_time(tmp_path: Path) -> None:
    rows = [
        _row("probe", "probe", 1.0),
        _row("prime", "prime", 1.0),
        _row("cached", "cached", 10.0, cached=500),
        _row("cached", "cached", 30.0, cached=500),
        _row("cached", "cached", 20.0, n=2000, cached=1000, prompt_tokens_server=None),
        {**_row("cached", "cached", 1.0), "status": "error"},
        _row("baseline", "baseline", 40.0),
    ]
    d = _run(
        tmp_path,
        "real",
        rows,
        [_phase("cached", "cached", 2.0, 1.5), _phase("baseline", "baseline", 4.0, 0.25)],
    )
    f = V.figures(d)
    assert set(label for label, _ in f) == {"cached", "baseline"}
    assert f[("cached", "TTFT p50 ms")] == pytest.approx(20.0)
    assert f[("cached", "hit ratio")] == pytest.approx(2000 / 4000)  # a missing server count falls back
    assert f[("cached", "req/s")] == pytest.approx(3 / 2.0)  # the failed row is not a success
    assert f[("baseline", "req/s")] == pytest.approx(1 / 4.0)
    assert ("cached", "goodput req/s") not in f  # no SLO given


def test_a_sequential_ttft_phase_has_no_request_rate_and_an_slo_adds_goodput(tmp_path: Path) -> None:
    rows = [
        _row("ttft", "cold", 50.0),
        _row("ttft", "warm", 5.0),
        _row("tp", "cached", 5.0),
        _row("tp", "cached", 80.0),
    ]
    d = _run(tmp_path, "seq", rows, [_phase("ttft", "ttft", 3.0, None), _phase("tp", "cached", 2.0, 1.0)])
    f = V.figures(d, {"ttft_p99_ms": 10.0})
    assert ("cold", "req/s") not in f and ("warm", "req/s") not in f
    assert f[("cached", "req/s")] == pytest.approx(1.0)
    assert f[("cached", "goodput req/s")] == pytest.approx(0.5)  # one of the two is within 10 ms


def test_figures_of_a_run_with_no_rows_are_empty(tmp_path: Path) -> None:
    assert V.figures(_run(tmp_path, "empty", [], [_phase("tp", "cached", 1.0, 0.0)])) == {}


def test_compare_sets_measured_beside_predicted_and_reads_the_saved_slo(tmp_path: Path) -> None:
    slo = "slo:\n  ttft_p50_ms: 25\n"
    real = _run(
        tmp_path,
        "real",
        [_row("tp", "cached", 20.0), _row("tp", "cached", 30.0)],
        [_phase("tp", "cached", 1.0, 2.0)],
        scenario=slo,
    )
    twin = _run(tmp_path, "twin", [_row("tp", "cached", 10.0)], [_phase("tp", "cached", 1.0, 1.0)])
    rows = {r.metric: r for r in V.compare(real, twin, other_system=True)}
    assert rows["TTFT p50 ms"].measured == pytest.approx(25.0)
    assert rows["TTFT p50 ms"].predicted == pytest.approx(10.0)
    assert rows["req/s"].error_pct == pytest.approx(-50.0)
    assert rows["goodput req/s"].measured == pytest.approx(1.0)  # 20 ms is good, 30 ms is not
    assert all(r.other_system and r.label == "cached" for r in rows.values())


# --- same_system / predict / validate ------------------------------------------------------------


def test_same_system_names_another_engine_or_pace(tmp_path: Path) -> None:
    d = _run(tmp_path, "r", [], [], engine="vllm", pace=0.1)
    assert V.same_system(d, {}) is None
    assert "engine vllm, the twin was fitted to sglang" in (V.same_system(d, {"engine": "sglang"}) or "")
    why = V.same_system(d, {"engine": "vllm", "pace": 1.0})
    assert why is not None and "pace 0.1" in why and "fitted at pace 1" in why
    assert V.same_system(d, {"engine": "vllm", "pace": 0.1}) is None


def _fake_kvbench(monkeypatch: pytest.MonkeyPatch, rc: int, make: bool, stderr: str = "") -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if make:
            out = Path(argv[argv.index("--output-dir") + 1])
            (out / f"twin-run-{len(calls)}").mkdir()
        return subprocess.CompletedProcess(argv, rc, stdout="", stderr=stderr)

    monkeypatch.setattr(V.subprocess, "run", run)
    return calls


def test_predict_reruns_the_saved_scenario_on_the_twin_in_real_time(monkeypatch, tmp_path: Path) -> None:
    real = _run(tmp_path, "real", [], [], scenario="test: ttft\n")
    calls = _fake_kvbench(monkeypatch, 0, True)
    made = V.predict(real, tmp_path / "twin.yaml", tmp_path / "out")
    assert made == tmp_path / "out" / "twin-run-1"
    argv = calls[0]
    assert argv[3:6] == ["run", str(real / "scenario.yaml"), "--mock-profile"]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert sets == list(V.TWIN_SETS)
    assert "--no-report" in argv and "--quiet" in argv


def test_predict_reports_the_childs_last_line_and_a_missing_scenario(monkeypatch, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no scenario\.yaml"):
        V.predict(_run(tmp_path, "bare", [], []), tmp_path / "t.yaml", tmp_path / "out")
    real = _run(tmp_path, "real", [], [], scenario="test: ttft\n")
    _fake_kvbench(monkeypatch, 2, False, stderr="starting\nscenario.test: bad value\n")
    with pytest.raises(UsageError, match=r"failed \(exit 2\): scenario.test: bad value$"):
        V.predict(real, tmp_path / "t.yaml", tmp_path / "out")
    _fake_kvbench(monkeypatch, 0, False)  # exit 0 yet no run directory is a failure too
    with pytest.raises(UsageError, match=r"exit 0\): no output"):
        V.predict(real, tmp_path / "t.yaml", tmp_path / "out")


def test_validate_warns_for_another_system_and_refuses_a_missing_directory(
    monkeypatch, tmp_path: Path
) -> None:
    real = _run(
        tmp_path,
        "real",
        [_row("tp", "cached", 20.0)],
        [_phase("tp", "cached", 1.0, 1.0)],
        engine="vllm",
        scenario="test: throughput\n",
    )
    twin_run = _run(tmp_path, "twin", [_row("tp", "cached", 22.0)], [_phase("tp", "cached", 1.0, 1.0)])
    monkeypatch.setattr(V, "predict", lambda run_dir, twin, out: twin_run)
    rows, warnings = V.validate(tmp_path / "t.yaml", [real], tmp_path / "out", {"engine": "sglang"})
    assert warnings == [f"warning: {real}: engine vllm, the twin was fitted to sglang"]
    p50 = next(r for r in rows if r.metric == "TTFT p50 ms")
    assert p50.error_pct == pytest.approx(10.0) and p50.other_system
    with pytest.raises(UsageError, match="no such run directory"):
        V.validate(tmp_path / "t.yaml", [tmp_path / "nope"], tmp_path / "out", {})


# --- measure -------------------------------------------------------------------------------------


def test_read_load_gives_each_closed_loop_phase_in_send_order(tmp_path: Path) -> None:
    rows = [
        _row("cached", "cached", 30.0, n=300, cached=100, sent_ns=3, output_tokens=0),
        _row("cached", "cached", 10.0, n=100, sent_ns=1),
        _row("cached", "cached", 20.0, n=200, cached=50, sent_ns=2, prompt_tokens_server=0, prompt_tokens=0),
        {**_row("cached", "cached", 1.0), "status": "error"},
        _row("baseline", "baseline", 7.0, sent_ns=1),
        _row("fill", "fill", 7.0, sent_ns=1),
    ]
    phases = [
        _phase("cached", "cached", 2.0, 1.5),
        _phase("baseline", "baseline", 1.0, None),
        _phase("fill", "fill", 1.0, 9.0),
    ]
    (load,) = read_load(_run(tmp_path, "tp", rows, phases, load=CONCURRENT, pace=0.5))
    assert (load.phase, load.concurrency, load.requests_per_s, load.pace) == ("cached", 4, 1.5, 0.5)
    # the zero-token row is dropped; a row without output tokens counts one
    assert [(q.prompt_tokens, q.cached_tokens, q.output_tokens) for q in load.requests] == [
        (100, 0, 16),
        (300, 100, 1),
    ]
    assert load.ttft_p50_s == pytest.approx(0.020)  # median of the three ok rows' TTFT, in seconds


def test_read_load_is_empty_for_a_sequential_or_unrecorded_load(tmp_path: Path) -> None:
    rows = [_row("cached", "cached", 10.0)]
    phases = [_phase("cached", "cached", 1.0, 1.0)]
    assert read_load(_run(tmp_path, "old", rows, phases, load=None)) == []
    seq = {**CONCURRENT, "kind": "sequential"}
    assert read_load(_run(tmp_path, "seq", rows, phases, load=seq)) == []


def _sample(name: str, value: float, t_ns: int, model: str = "m") -> dict[str, Any]:
    return {"name": name, "value": value, "t_ns": t_ns, "labels": {"model_name": model}}


def test_read_gauges_sums_labels_per_scrape_and_sees_waiting(tmp_path: Path) -> None:
    a = _run(
        tmp_path,
        "a",
        [],
        [],
        metrics=[
            _sample("vllm:num_requests_running", 3, 1, "m1"),
            _sample("vllm:num_requests_running", 2, 1, "m2"),  # the same scrape: 5 running
            _sample("vllm:num_requests_waiting", 0, 1),
            _sample("vllm:num_requests_running", 4, 2),
            _sample("vllm:num_requests_waiting", 1, 2),
            {"name": "vllm:num_requests_running", "value": "n/a", "t_ns": 3},
        ],
    )
    b = _run(tmp_path, "b", [], [])  # no metrics.jsonl: skipped
    # 1 waiting beside 4 running, where 5 ran at another scrape: a lagging gauge, not a limit of 4 or 5
    assert read_gauges([a, b]) == Gauges("vllm:num_requests_running", 5, False, 2)
    c = _run(
        tmp_path,
        "c",
        [],
        [],
        metrics=[
            _sample("vllm:num_requests_running", 5, 1),
            _sample("vllm:num_requests_waiting", 2, 1),
            _sample("vllm:num_requests_running", 3, 2),
            _sample("vllm:num_requests_waiting", 0, 2),
        ],
    )
    assert read_gauges([c]) == Gauges("vllm:num_requests_running", 5, True, 2)  # waited while 5 ran


def test_read_gauges_falls_through_the_engine_families(tmp_path: Path) -> None:
    d = _run(
        tmp_path,
        "l",
        [],
        [],
        metrics=[
            _sample("llamacpp:requests_processing", 2, 1),
            _sample("llamacpp:requests_processing", 1, 2),
        ],
    )
    assert read_gauges([d]) == Gauges("llamacpp:requests_processing", 2, False, 2)
    assert read_gauges([_run(tmp_path, "none", [], [], metrics=[_sample("other", 1, 1)])]) is None
