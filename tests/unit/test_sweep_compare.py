"""`kvbench compare SWEEP_A SWEEP_B`: points matched by the swept values (and arm), each metric's
relative change computed from the two sweep.json files, warnings when the sweeps differ in kind."""

import json

import pytest

from kvbench.sweep.state import BaselinePlan, PointState, SweepPlan, SweepState, write_state


def metrics(rps: float, ttft: float, good: int = 9, n: int = 10) -> dict:
    return {
        "requests": n, "ok": n, "throughput_rps": rps, "ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft,
        "goodput_rps": rps * good / n, "attainment": good / n, "attainment_ci": [0.5, 1.0],
        "goodput_ci": [1.0, 2.0],
    }  # fmt: skip


def write_sweep(path, field, values, scale, scenario="throughput", slo=None, baseline=False):
    plan = SweepPlan(scenario=scenario, over=[(field, list(values))], slo=slo or {"ttft_p99_ms": 100.0})
    if baseline:
        plan.baseline = BaselinePlan(offload_off=True)
    points = []
    for i, v in enumerate(values):
        arms = ("main", "baseline") if baseline else ("main",)
        for arm in arms:
            m = metrics(float(v) * scale, 10.0 * float(v) * (1.5 if arm == "baseline" else 1.0))
            name = f"{i}-{field}={v}" + ("-baseline" if arm == "baseline" else "")
            points.append(
                PointState(name=name, index=i, assignment={field: v}, status="complete", arm=arm, metrics=m)
            )
    path.mkdir()
    write_state(path, SweepState(kvbench_version="0", status="complete", plan=plan, points=points))
    return path


def test_points_match_by_value_and_changes_are_b_against_a(tmp_path, kvbench):
    a = write_sweep(tmp_path / "a", "load.concurrency", ["1", "2", "4"], scale=10.0)
    b = write_sweep(tmp_path / "b", "load.concurrency", ["2", "4", "8"], scale=15.0)
    code, out, err = kvbench("compare", str(a), str(b), "-o", str(tmp_path / "c"))
    assert code == 0 and err == "", err
    data = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert [p["point"] for p in data["points"]] == ["load.concurrency=2", "load.concurrency=4"]
    for p in data["points"]:
        va, vb, change = p["metrics"]["throughput_rps"]
        assert vb / va == pytest.approx(1.5) and change == "+50.0%"
        assert p["metrics"]["ttft_p50_ms"][2] == "+0.0%"  # the same TTFT at the same load
    assert "A only: 0-load.concurrency=1" in out and "B only: 2-load.concurrency=8" in out
    assert (
        "| load.concurrency=4 | throughput (req/s) | 40.0 | 60.0 | +50.0% |"
        in (tmp_path / "c" / "compare.md").read_text()
    )


def test_different_fields_scenarios_and_slos_are_warned_about(tmp_path, kvbench):
    a = write_sweep(tmp_path / "a", "load.concurrency", ["1", "2"], scale=10.0)
    b = write_sweep(
        tmp_path / "b", "prompts.count", ["1", "2"], 10.0, scenario="ttft", slo={"e2e_p99_ms": 9.0}
    )
    code, _, err = kvbench("compare", str(a), str(b), "-o", str(tmp_path / "c"), "-q")
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 3 and all(x.startswith("compare: warning: ") for x in lines)
    assert "different fields (A: load.concurrency; B: prompts.count): no point can be matched" in lines[0]
    assert "different scenarios (A: throughput; B: ttft)" in lines[1]
    assert "different SLOs" in lines[2]
    assert "**Warning:** the sweeps ran different scenarios" in (tmp_path / "c" / "compare.md").read_text()
    assert json.loads((tmp_path / "c" / "compare.json").read_text())["points"] == []


def test_two_armed_sweeps_match_arm_by_arm(tmp_path):
    from kvbench.report.sweep.compare import matched_points
    from kvbench.report.sweep.tables import read_sweep

    a = write_sweep(tmp_path / "a", "load.concurrency", ["1", "2"], scale=10.0, baseline=True)
    b = write_sweep(tmp_path / "b", "load.concurrency", ["1", "2"], scale=20.0, baseline=True)
    points, only = matched_points(read_sweep(a), read_sweep(b))
    assert only == []
    assert [(p["a"], p["b"]) for p in points][:2] == [
        ("0-load.concurrency=1", "0-load.concurrency=1"),
        ("0-load.concurrency=1-baseline", "0-load.concurrency=1-baseline"),
    ]
    assert points[1]["point"] == "load.concurrency=1 (baseline)"


def test_a_sweep_compares_with_a_sweep_only(tmp_path, kvbench):
    a = write_sweep(tmp_path / "a", "load.concurrency", ["1"], scale=10.0)
    run = tmp_path / "run"
    run.mkdir()
    code, _, err = kvbench("compare", str(a), str(run), "-o", str(tmp_path / "c"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "sweep with sweep" in err
    code, _, err = kvbench("compare", str(a), str(a), str(a), "-o", str(tmp_path / "c"))
    assert code == 2 and "two at a time" in err


def test_report_on_a_sweep_rewrites_its_table_and_plots_from_sweep_json(tmp_path, kvbench):
    import csv

    a = write_sweep(tmp_path / "a", "load.concurrency", ["1", "2"], scale=10.0, baseline=True)
    code, out, err = kvbench("report", str(a))
    assert code == 0, err
    with (a / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["point"], r["arm"]) for r in rows] == [
        ("0-load.concurrency=1", "main"), ("0-load.concurrency=1-baseline", "baseline"),
        ("1-load.concurrency=2", "main"), ("1-load.concurrency=2-baseline", "baseline"),
    ]  # fmt: skip
    assert float(rows[3]["throughput_rps"]) == 20.0
    assert "## Offload on (A) vs off (B)" in out and "G2-G4 not caching" in out
    # the plots are redrawn from sweep.json too: one series per arm
    assert (a / "sweep_latency.png").stat().st_size > 10_000
    assert (a / "sweep_attainment.png").stat().st_size > 10_000
