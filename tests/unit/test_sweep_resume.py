"""A sweep interrupted at a point restarts at that point: complete points are skipped (the runs
themselves are faked here; tests/integration/test_sweep_runs.py runs real ones)."""

import pytest

from kvbench.errors import UsageError
from kvbench.run.runner import RunOutcome
from kvbench.sweep import execute
from kvbench.sweep.execute import Sweep, SweepInterrupted
from kvbench.sweep.state import SweepPlan, check_same_plan, read_state


def plan(values=("1", "2", "3")):
    return SweepPlan(
        scenario="throughput",
        sets={"target.mock_profile": "ci"},
        over=[("load.concurrency", list(values))],
        slo={"ttft_p99_ms": 100.0},
        stop_at_saturation=False,
    )


@pytest.fixture
def fake_runs(monkeypatch):
    """Fake runs: record each point's concurrency; interrupt the one named in `interrupt_at`."""
    calls = []
    interrupt_at = set()

    async def run_scenario(scn, opts):
        c = scn.load.concurrency
        calls.append(c)
        run_dir = opts.output_dir / f"run-{len(calls)}"
        run_dir.mkdir()
        if c in interrupt_at:
            interrupt_at.discard(c)
            return RunOutcome(run_dir, "interrupted", 130, {}, 0)
        return RunOutcome(run_dir, "complete", 0, {}, 4)

    def point_figures(run_dir, slo, label, params=None):
        n = int(run_dir.name.split("-")[1])
        return {"requests": 4, "ok": 4, "good": 4, "throughput_rps": float(n), "e2e_p50_ms": 10.0}

    monkeypatch.setattr(execute, "run_scenario", run_scenario)
    monkeypatch.setattr(execute, "point_figures", point_figures)
    monkeypatch.setattr(execute, "point_run", lambda run_dir: None)  # a fake run has no manifest
    return calls, interrupt_at


async def test_an_interrupted_sweep_resumes_at_the_interrupted_point(tmp_path, fake_runs):
    calls, interrupt_at = fake_runs
    interrupt_at.add(2)
    sweep = Sweep.open(tmp_path, plan(), None, quiet=True)
    with pytest.raises(SweepInterrupted, match="--resume"):
        await sweep.run()
    state = read_state(tmp_path)
    assert [p.status for p in state.points] == ["complete", "interrupted"]
    assert state.status == "interrupted"
    assert calls == [1, 2]

    again = Sweep.open(tmp_path, state.plan, state, quiet=True)
    done = await again.run()
    assert calls == [1, 2, 2, 3]  # point 0 not run again; the interrupted one restarted
    assert [p.status for p in done.points] == ["complete"] * 3
    assert any("skipped" in line for line in again.lines)
    assert read_state(tmp_path).status == "complete"
    assert (tmp_path / "summary.csv").read_text().count("\n") == 4  # header + 3 points

    third = Sweep.open(tmp_path, done.plan, read_state(tmp_path), quiet=True)
    await third.run()
    assert calls == [1, 2, 2, 3]  # all complete: nothing runs


def test_a_directory_holding_another_sweep_is_refused(tmp_path):
    with pytest.raises(UsageError, match="holds another sweep"):
        check_same_plan(plan(), plan(("1", "4")), tmp_path)
    check_same_plan(plan(), plan(), tmp_path)


async def test_a_saturated_grid_stops_and_says_so(tmp_path, fake_runs, monkeypatch):
    calls, _ = fake_runs

    def flat(run_dir, slo, label, params=None):
        n = int(run_dir.name.split("-")[1])  # throughput stops growing after point 2; latency climbs
        return {"requests": 4, "ok": 4, "good": 4, "throughput_rps": min(n, 2) * 10.0, "e2e_p50_ms": 10.0 * n}

    monkeypatch.setattr(execute, "point_figures", flat)
    p = plan(("1", "2", "4", "8"))
    p.stop_at_saturation = True
    state = await Sweep.open(tmp_path, p, None, quiet=True).run()
    assert calls == [1, 2, 4]
    assert [pt.status for pt in state.points] == ["complete", "complete", "complete", "skipped"]
    assert any("saturated at load 4" in n for n in state.notes)
