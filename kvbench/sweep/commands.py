"""`kvbench sweep`: parse the flags, check every point before the first runs, run, print."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kvbench.sweep.state import BaselinePlan, SweepPlan, SweepState

SWEEP_HELP = """Run a scenario at each value of one or two fields, or search a load range for goodput.

\b
  kvbench sweep throughput --over load.concurrency=1,2,4,8 --slo ttft_p99_ms=500
  kvbench sweep throughput --over load.concurrency=4,8 --over prompts.count=10,40
  kvbench sweep throughput --search goodput --over load.concurrency=1..32 \\
        --slo ttft_p99_ms=500 --attainment 0.9
  kvbench sweep --resume results/sweep-...     continue at the first point not complete
  kvbench sweep throughput --over load.concurrency=1,4 --baseline-offload-off   + arm B, offload off
  kvbench sweep throughput --mock-profile laptop --set 'prompts.lengths=[4000]' \\
        --set load.concurrency=4 --over working_set=8k,16k,32k,64k,128k      tier-cliff map

Each point is a full run (its own verified cold start) in SWEEP_DIR/points/<i>-<field=value>/;
SWEEP_DIR holds sweep.json, summary.csv, summary.md and plots (summary.parquet too with
pip install 'kvbench[parquet]'). A one-field load grid stops once throughput no longer grows while
latency does (--no-stop-at-saturation runs every point). On the embedded mock, a point whose TTFT
is partly the mock's own lateness (above 10% of the modelled TTFT) is marked LATE in the table and
ringed in the plots, with the pace (time_scale) that would avoid it.
"""


def sweep_cmd(
    scenario: Annotated[
        str | None, typer.Argument(help="Scenario name or YAML path (not with --resume).")
    ] = None,
    over: Annotated[
        list[str] | None,
        typer.Option("--over", help="FIELD=V1,V2,... (once or twice); FIELD=LO..HI to search."),
    ] = None,
    set_values: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field in every point.")
    ] = None,
    mock_profile: Annotated[
        str | None, typer.Option(help="Mock profile (ci, laptop, ...) for every point.")
    ] = None,
    base_url: Annotated[str | None, typer.Option(help="Server root URL; absent = the embedded mock.")] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option("--slo", help="NAME=MS: ttft_p50_ms, ttft_p99_ms, itl_p99_ms, e2e_p99_ms (else slo:)."),
    ] = None,
    attainment: Annotated[float, typer.Option(help="Share of requests that must meet the SLO.")] = 0.9,
    search: Annotated[
        str | None, typer.Option(help="goodput: bisect --over LO..HI for the highest load meeting the SLO.")
    ] = None,
    step: Annotated[float, typer.Option(help="Search resolution (loads this close end it).")] = 1.0,
    max_repeats: Annotated[
        int, typer.Option(help="Search: runs of one load while its interval straddles.")
    ] = 3,
    label: Annotated[
        str | None, typer.Option(help="Request label measured (default: the most common).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Sweep directory (default results/sweep-<time>-<scenario>).")
    ] = None,
    resume: Annotated[Path | None, typer.Option(help="Resume the sweep in this directory.")] = None,
    stop_at_saturation: Annotated[bool, typer.Option(help="Stop a load grid once saturated.")] = True,
    allow_unverified_cold: Annotated[
        bool, typer.Option("--allow-unverified-cold", help="Run even if a cold cache cannot be verified.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    tiers: Annotated[
        str | None,
        typer.Option(
            help="Tier sizes for a working_set sweep's predicted cliffs, e.g. G1=2048,G2=16MiB,kv=4KiB: "
            "a size ending in B is bytes (kv= the KV bytes per token, or a model preset/config.json), "
            "Nslots whole prompts, else tokens (16k). Wins over the mock profile and the server's own."
        ),
    ] = None,
    baseline_url: Annotated[str | None, typer.Option(help="Arm B: the same server, offload off.")] = None,
    baseline_set: Annotated[list[str] | None, typer.Option(help="Arm B: FIELD=V on each point.")] = None,
    baseline_offload_off: Annotated[bool, typer.Option(help="Arm B: the mock, G1 on, G2-G4 off.")] = False,
) -> None:
    import asyncio

    from kvbench.errors import UsageError
    from kvbench.sweep.arms import baseline_plan
    from kvbench.sweep.execute import Sweep
    from kvbench.sweep.state import check_resumable, check_same_plan, read_state

    if resume is not None:
        found = read_state(resume)
        if found is None:
            raise UsageError(f"--resume {resume}: no sweep.json there")
        flags: dict[str, object] = {"SCENARIO": scenario, "--over": over, "--set": set_values, "--slo": slo}
        flags.update({"--search": search, "--mock-profile": mock_profile, "--base-url": base_url})
        flags["--tiers"] = tiers
        flags.update(zip(BASELINE_FLAGS, (baseline_url, baseline_set, baseline_offload_off), strict=True))
        refuse_flags(flags)
        check_resumable(found.plan, resume)
        plan, sweep_dir = found.plan, resume
    else:
        if scenario is None:
            raise UsageError("name a SCENARIO (or --resume DIR)")
        plan = make_plan(
            scenario,
            over or [],
            set_values or [],
            mock_profile,
            base_url,
            slo or [],
            attainment,
            search,
            step,
            max_repeats,
            label,
            stop_at_saturation,
            baseline=baseline_plan(baseline_url, baseline_set or [], baseline_offload_off),
        )
        from kvbench.sweep.tiers import parse_tiers

        parse_tiers(tiers)  # a bad --tiers is one line, exit 2, before any point
        plan.tiers = tiers
        sweep_dir = out or default_dir(scenario)
        found = read_state(sweep_dir)
        if found is not None:
            check_same_plan(found.plan, plan, sweep_dir)
    sweep = Sweep.open(sweep_dir, plan, found, allow_unverified_cold=allow_unverified_cold, quiet=quiet)
    sweep.check_all()  # every point validates before the first one runs
    sweep_dir.mkdir(parents=True, exist_ok=True)
    finish(sweep_dir, asyncio.run(sweep.run()), quiet)


BASELINE_FLAGS = ("--baseline-url", "--baseline-set", "--baseline-offload-off")


def refuse_flags(flags: dict[str, object]) -> None:
    """--resume takes its plan from sweep.json: a flag that would change it is one line."""
    given = [name for name, value in flags.items() if value]
    if given:
        from kvbench.errors import UsageError

        raise UsageError(f"--resume DIR takes the plan from DIR/sweep.json: drop {', '.join(given)}")


def finish(sweep_dir: Path, state: SweepState, quiet: bool) -> None:
    """The sweep's plots, then its summary (printed unless quiet)."""
    from kvbench.report.sweep.tables import write_sweep_report
    from kvbench.sweep.plots import write_plots

    write_plots(sweep_dir, state)
    write_sweep_report(sweep_dir, quiet=quiet)
    print(f"sweep: {sweep_dir}")


def make_plan(
    scenario: str,
    over: list[str],
    sets: list[str],
    mock_profile: str | None,
    base_url: str | None,
    slo: list[str],
    attainment: float,
    search: str | None,
    step: float,
    max_repeats: int,
    label: str | None,
    stop_at_saturation: bool,
    baseline: BaselinePlan | None = None,
) -> SweepPlan:
    """The sweep's plan from its flags; every flag checked (one line, exit 2) before any point."""
    from kvbench.configfile import parse_set
    from kvbench.errors import UsageError
    from kvbench.sweep.grid import parse_over, parse_range, parse_slo, scenario_slo
    from kvbench.sweep.state import SearchPlan, SweepPlan

    common = parse_set(sets)
    if mock_profile is not None:
        common["target.mock_profile"] = mock_profile
    if base_url is not None:
        common["target.base_url"] = base_url
    if not 0 < attainment <= 1:
        raise UsageError(f"--attainment {attainment}: a share, above 0 and at most 1")
    goals = parse_slo(slo) or scenario_slo(scenario, common)  # --slo overrides the scenario's slo:
    plan = SweepPlan(
        scenario=scenario,
        sets=common,
        slo=goals,
        attainment=attainment,
        label=label,
        stop_at_saturation=stop_at_saturation,
        baseline=baseline,
    )
    if search is None:
        plan.over = [(a.field, list(a.values)) for a in parse_over(over)]
        return plan
    if search != "goodput":
        raise UsageError(f"--search {search}: the one search is goodput")
    if baseline is not None:
        raise UsageError("--baseline-*: a second arm runs with a grid (--over FIELD=V1,V2,...), not a search")
    if not goals:
        raise UsageError("--search goodput needs an SLO: --slo ttft_p99_ms=MS (or another)")
    if len(over) != 1:
        raise UsageError("--search goodput steps one field: --over load.concurrency=LO..HI")
    field, lo, hi, integer = parse_range(over[0])
    if step <= 0 or (integer and step != int(step)):
        raise UsageError(f"--step {step}: a positive {'whole ' if integer else ''}number")
    if max_repeats < 1:
        raise UsageError(f"--max-repeats {max_repeats}: at least 1")
    plan.search = SearchPlan(field=field, lo=lo, hi=hi, step=step, integer=integer, max_repeats=max_repeats)
    return plan


def default_dir(scenario: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in Path(scenario).stem)[:40]
    return Path("results") / f"sweep-{stamp}-{name}"


def redraw_plots(sweep_dir: Path, data: dict[str, object]) -> None:
    """`kvbench report SWEEP_DIR`'s plots: the same writer as the sweep's own."""
    from kvbench.sweep.plots import write_plots
    from kvbench.sweep.state import SweepState

    write_plots(sweep_dir, SweepState.model_validate(data))


def register(app: typer.Typer) -> None:
    from kvbench.report.sweep.tables import PLOT_WRITERS

    if redraw_plots not in PLOT_WRITERS:  # the report layer redraws a sweep's plots without importing it
        PLOT_WRITERS.append(redraw_plots)
    app.command("sweep", help=SWEEP_HELP)(sweep_cmd)
