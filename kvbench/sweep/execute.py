"""A sweep, point after point: each point one normal run (its own verified cold start, as the
scenario says) in SWEEP_DIR/points/<name>/, its figures read back from the saved files, sweep.json
rewritten after every point so that a rerun skips the points already complete."""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench import __version__
from kvbench.configfile import Raw
from kvbench.errors import KvbenchError, UsageError
from kvbench.run.preflight.names import check_names
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import Scenario, load_scenario
from kvbench.sweep.arms import arm_overhead, baseline_overrides, offload_off_overrides
from kvbench.sweep.cliff import WORKING_SET, cliff_figures, cliff_summary, expand, prompt_length
from kvbench.sweep.grid import LOAD_FIELDS, Axis, check_slo_produced, grid, point_name
from kvbench.sweep.points import mock_params, point_figures, point_run
from kvbench.sweep.saturation import LoadPoint, saturation
from kvbench.sweep.search import Sample, search_capacity
from kvbench.sweep.state import POINTS, PointState, SweepPlan, SweepState, write_state


class SweepInterrupted(KvbenchError):
    """Ctrl-C (or SIGTERM) during a point: the point is marked, the sweep resumes there."""

    exit_code = 130


@dataclass
class Sweep:
    """One sweep directory and its plan; `state` is what sweep.json says."""

    sweep_dir: Path
    plan: SweepPlan
    state: SweepState
    allow_unverified_cold: bool = False
    quiet: bool = False
    done: int = 0
    lines: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, sweep_dir: Path, plan: SweepPlan, found: SweepState | None, **kw: Any) -> Sweep:
        state = found or SweepState(kvbench_version=__version__, status="running", plan=plan)
        state.status, state.notes, state.search = "running", [], None
        return cls(sweep_dir, plan, state, **kw)

    # -- planning -------------------------------------------------------------------------------------

    def scenario_for(self, assignment: dict[str, str], arm: str = "main") -> Scenario:
        """The point's scenario: the common --set overrides, then the point's own fields (and, for
        arm B, the baseline's)."""
        overrides: dict[str, Any] = {k: Raw(v) for k, v in self.plan.sets.items()}
        baseline = self.plan.baseline if arm == "baseline" else None
        try:
            if WORKING_SET in assignment:
                base, _ = load_scenario(self.plan.scenario, dict(overrides))
                assignment = expand(assignment, prompt_length(base), base.test_name)
            overrides.update({k: Raw(v) for k, v in assignment.items()})
            if baseline is not None:
                overrides.update(baseline_overrides(baseline))
            scn, _ = load_scenario(self.plan.scenario, overrides)
            if baseline is not None and baseline.offload_off:
                scn, _ = load_scenario(self.plan.scenario, {**overrides, **offload_off_overrides(scn)})
            check_names(scn)
            check_slo_produced(self.plan.slo, scn)
        except KvbenchError as exc:
            if not assignment and baseline is None:
                raise
            where = " ".join(f"{k}={v}" for k, v in assignment.items())
            what = (f"--over {where}" if where else "") + (" (baseline arm)" if baseline else "")
            raise UsageError(f"{what.strip()}: {exc.lines()[0]}") from None
        return scn

    def check_all(self) -> None:
        """Every grid point (or both ends of a search range) validates, before any point runs."""
        search = self.plan.search
        if search is not None:
            for load in (search.lo, search.hi):
                self.scenario_for({search.field: self.load_text(load)})
            return
        for assignment in grid_of(self.plan):
            self.scenario_for(assignment)
            if self.plan.baseline is not None:
                self.scenario_for(assignment, "baseline")

    def load_text(self, load: float) -> str:
        integer = self.plan.search is not None and self.plan.search.integer
        return str(int(load)) if integer else f"{load:g}"

    # -- running --------------------------------------------------------------------------------------

    def save(self) -> None:
        from kvbench.sweep.table import write_tables

        write_state(self.sweep_dir, self.state)
        write_tables(self.sweep_dir, self.state)

    async def run_pair(self, index: int, assignment: dict[str, str], repeat: int = 0) -> PointState:
        """The point on arm A, then (with a baseline) the same point on arm B, judged on A's label."""
        point = await self.run_point(index, assignment, repeat)
        if self.plan.baseline is not None and point.metrics is not None:
            await self.run_point(index, assignment, repeat, pair=point)
        return point

    async def run_point(
        self, index: int, assignment: dict[str, str], repeat: int = 0, pair: PointState | None = None
    ) -> PointState:
        """One run; `pair` is arm A's point when this is arm B's."""
        arm = "main" if pair is None else "baseline"
        name = point_name(index, assignment, repeat) + ("-baseline" if pair is not None else "")
        point = self.state.point(name)
        if point is not None and point.status == "complete" and point.metrics is not None:
            self.done += 1
            self.say(f"[{self.done}] {name}: complete in {point.run_dir}, skipped")
            return point
        if point is None:
            point = PointState(name=name, index=index, assignment=assignment, repeat=repeat, arm=arm)
            self.state.points.append(point)
        scn = self.scenario_for(assignment, arm)
        folder = self.sweep_dir / POINTS / name
        folder.mkdir(parents=True, exist_ok=True)
        point.status, point.note = "pending", ""
        self.save()
        opts = RunOptions(
            output_dir=folder, quiet=True, report=False, allow_unverified_cold=self.allow_unverified_cold
        )
        try:
            outcome = await run_scenario(scn, opts)
        except KvbenchError as exc:
            point.status, point.note = "failed", exc.lines()[0]
            self.state.status = "failed"
            self.save()
            raise
        point.run_dir = str(outcome.run_dir.relative_to(self.sweep_dir)) if outcome.run_dir else None
        if outcome.status == "interrupted":
            point.status, self.state.status = "interrupted", "interrupted"
            self.save()
            raise SweepInterrupted(
                f"sweep interrupted at point {name}; `kvbench sweep --resume {self.sweep_dir}` restarts there"
            )
        assert outcome.run_dir is not None
        point.exit_code = outcome.exit_code
        label = self.plan.label or (pair.metrics or {}).get("label") if pair is not None else self.plan.label
        params = mock_params(scn)
        point.metrics = point_figures(outcome.run_dir, self.plan.slo, label, params)
        point.run = point_run(outcome.run_dir)
        if pair is not None and pair.run_dir is not None:
            both = (mock_params(self.scenario_for(assignment)), params)
            point.metrics.update(arm_overhead(self.sweep_dir / pair.run_dir, outcome.run_dir, label, both))
        elif WORKING_SET in assignment:
            point.metrics.update(cliff_figures(outcome.run_dir, assignment, scn, point.metrics))
        point.status = "complete"
        self.save()
        self.done += 1
        self.say(progress_line(self.done, name, point.metrics, bool(self.plan.slo)))
        return point

    async def run(self) -> SweepState:
        if self.plan.search is not None:
            await self.run_search()
        else:
            await self.run_grid()
        if any(f == WORKING_SET for f, _ in self.plan.over):
            self.state.cliff = cliff_summary(self.state, self.scenario_for(grid_of(self.plan)[0]))
        self.state.status = "complete"
        self.save()
        return self.state

    async def run_grid(self) -> None:
        points = grid_of(self.plan)
        axis = self.plan.over[0][0]
        watch = self.plan.stop_at_saturation and len(self.plan.over) == 1 and axis in LOAD_FIELDS
        seen: list[LoadPoint] = []
        for i, assignment in enumerate(points):
            point = await self.run_pair(i, assignment)
            if not watch:
                continue
            m = point.metrics or {}
            seen.append(LoadPoint(float(assignment[axis]), m.get("throughput_rps"), m.get("e2e_p50_ms")))
            reason = saturation(seen)
            if reason and i + 1 < len(points):
                self.state.notes.append(f"{reason}: stopped, {len(points) - i - 1} points not run")
                self.say(self.state.notes[-1])
                for j in range(i + 1, len(points)):
                    self.mark_skipped(j, points[j], reason)
                break

    def mark_skipped(self, index: int, assignment: dict[str, str], reason: str) -> None:
        name = point_name(index, assignment)
        point = self.state.point(name)
        if point is None:
            point = PointState(name=name, index=index, assignment=assignment)
            self.state.points.append(point)
        point.status, point.note = "skipped", reason
        self.save()

    async def run_search(self) -> None:
        search = self.plan.search
        assert search is not None
        order = itertools.count()

        async def evaluate(load: float, repeat: int) -> Sample:
            point = await self.run_point(next(order), {search.field: self.load_text(load)}, repeat)
            m = point.metrics or {}
            duration = m.get("duration_s")
            rate = m.get("requests", 0) / duration if duration else None
            return Sample(m.get("good", 0), m.get("requests", 0), m.get("goodput_rps"), rate)

        result = await search_capacity(
            evaluate,
            search.lo,
            search.hi,
            target=self.plan.attainment,
            step=search.step,
            integer=search.integer,
            max_repeats=search.max_repeats,
        )
        self.state.search = result.to_dict()
        self.state.notes.append(result.note)
        self.say(result.note)

    def say(self, line: str) -> None:
        self.lines.append(line)
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)


def grid_of(plan: SweepPlan) -> list[dict[str, str]]:
    return grid([Axis(f, tuple(v)) for f, v in plan.over])


def _ms(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}"


def progress_line(k: int, name: str, m: dict[str, Any], slo: bool) -> str:
    tput = m.get("throughput_rps")
    line = (
        f"[{k}] {name}: {m['ok']}/{m['requests']} ok, "
        f"{'-' if tput is None else f'{tput:.3g}'} req/s, "
        f"TTFT p50 {_ms(m.get('ttft_p50_ms'))} ms p99 {_ms(m.get('ttft_p99_ms'))} ms"
    )
    if slo and m.get("attainment") is not None:
        lo, hi = m["attainment_ci"]
        gp = m.get("goodput_rps")
        line += (
            f", attainment {m['attainment']:.0%} [{lo:.0%}, {hi:.0%}], "
            f"goodput {'-' if gp is None else f'{gp:.3g}'} req/s"
        )
    if m.get("mock_late"):
        line += f", LATE: mock lateness {m['mock_late_share']:.0%} of the modelled TTFT"
    for key, what in (("overhead_ttft_p50", "TTFT p50"), ("overhead_modelled_ttft_p50", "modelled TTFT p50")):
        if m.get(key) is not None:
            ci = m.get(f"{key}_ci")
            line += f", offload overhead {what} {m[key]:+.1%}" + (
                f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""
            )
    return line
