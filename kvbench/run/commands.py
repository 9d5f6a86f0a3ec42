"""`kvbench run`, `kvbench validate`, `kvbench export`: parse flags, validate once, call one function."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from kvbench.engines.adapters import engine_help
from kvbench.errors import UsageError
from kvbench.run import flags as gf

RUN_HELP = """Run a scenario (a name from scenarios/ or a path) and write a run directory.

\b
  kvbench run ttft                         TTFT cold vs cached, against the embedded mock
  kvbench run throughput --baseline        cached vs no-reuse baseline, 200 requests / 28 connections
  kvbench run throughput --noisy           quiet/noisy pairs (ABBA) on one filled cache, as published
  kvbench run throughput --noisy --empty-cache    each phase from an empty cache instead
  kvbench run sessions --baseline          multi-turn users: per-turn TTFT and serving tier vs no reuse
  kvbench run replay --trace my-trace.jsonl   a Mooncake/Bailian/WEKA trace, token-exact, on its timestamps
  kvbench run ttft --base-url http://127.0.0.1:8000 --model my-model

With no --base-url (and none in the scenario) kvbench starts its mock server and
says so: such figures are simulated. Flags override the scenario; only the flags
you set are applied, and the resolved scenario is saved with the results.
"""


def _parse_set(values: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE; each value is read later as the type of the field it sets."""
    from kvbench.configfile import Raw, parse_set

    return {key: Raw(raw) for key, raw in parse_set(values).items()}


def _parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(x.replace("_", "").replace("k", "000")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(
            f"--lengths {text!r}: expected comma-separated token counts, e.g. 1000,4000,8k"
        ) from None
    if not lengths or any(n <= 0 for n in lengths):
        raise UsageError(f"--lengths {text!r}: lengths must be positive")
    return lengths


def build_overrides(general: Any = None, scenario: str | None = None, **flags: Any) -> dict[str, Any]:
    """Map the CLI flags the user SET (not None, not False) to dotted scenario keys.

    Which key a flag sets is declared on the scenario field itself (`flag(...)` metadata); the
    general flags (`general`, a run.flags.General) go to whichever field the `scenario`'s test
    reads them from (kvbench.run.flags), so their keys depend on the file."""
    from kvbench.configfile import flag_keys
    from kvbench.scenario import Scenario
    from kvbench.scenario.testtypes import EMPTY_CACHE

    out: dict[str, Any] = {}
    for name, key in flag_keys(Scenario).items():
        value = flags.get(name)
        if value is None or value is False:
            continue
        if name == "empty_cache":
            value = EMPTY_CACHE
        out[key] = _parse_lengths(value) if name == "lengths" else value
    sets = _parse_set(flags.get("set_values") or [])
    if general is not None and scenario is not None:
        import dataclasses

        from kvbench.run.flags import general_overrides
        from kvbench.scenario.loading import raw_scenario

        for name in ("lengths", "prompt_count"):  # the run's test decides whether they apply
            out.pop(flag_keys(Scenario)[name], None)
        lengths = _parse_lengths(flags["lengths"]) if flags.get("lengths") else None
        general = dataclasses.replace(general, lengths=lengths, prompt_count=flags.get("prompt_count"))
        out.update(general_overrides(general, raw_scenario(scenario)[0], sets))
    out.update(sets)
    return out


# --serve-metrics (kvbench.telemetry.serve_metrics); out here to keep run_cmd short
ServeMetricsOpt = Annotated[
    int | None,
    typer.Option(
        help="Serve kvbench's own progress as Prometheus metrics on PORT while it runs (0: a free port, "
        "printed); names in docs/telemetry.md.",
        metavar="PORT",
        min=0,
        max=65535,
    ),
]
TraceOpt = Annotated[
    str | None, typer.Option(help="Replay: the trace file (.jsonl or .jsonl.gz; test.trace.path).")
]
ClusterOpt = Annotated[
    str | None,
    typer.Option(
        help="Where noise clients and load workers run: local, ray (RAY_ADDRESS, the cluster of "
        "this node, else a local Ray) or ray://HOST:PORT. Needs `pip install 'kvbench[ray]'`."
    ),
]
DatasetOpt = Annotated[
    str | None, typer.Option(help="A vLLM-bench or AIPerf dataset file as the prompts (prompts.dataset).")
]
DatasetFormatOpt = Annotated[
    str | None, typer.Option(help="Its format (prompts.dataset_format; default: detected).")
]


def run_arms_if_asked(
    scenario: str,
    overrides: dict[str, Any],
    arms: tuple[str | None, str | None],
    flags: dict[str, Any],
    allow: bool,
) -> None:
    """With --arms: one run per arm, then the verdict (kvbench.run.arms_run); exits when done."""
    if arms[0] is not None:
        from kvbench.run.arms_run import arms_cmd

        raise typer.Exit(arms_cmd(scenario, overrides, arms, flags["output_dir"], flags["quiet"], allow))


ArmsOpt = Annotated[
    str | None, typer.Option(help="Replay: offload,no-offload: each arm from a cold start, ABBA, a verdict.")
]
BaselineUrlOpt = Annotated[
    str | None, typer.Option(help="With --arms on a server: the same server with offload off.")
]
ServeHostOpt = Annotated[
    str, typer.Option(help="With --serve-metrics: the address to listen on.", metavar="HOST")
]
NoisyOpt = Annotated[
    bool,
    typer.Option(
        "--noisy",
        help="Throughput: alternating quiet/noisy pairs, all reading the same filled cache "
        "(the published reading); the report gives the effect with its interval.",
    ),
]
EmptyCacheOpt = Annotated[
    bool,
    typer.Option(
        "--empty-cache",
        help="With --noisy: the empty-cache variant, every phase starts from an empty cache "
        "(test.noisy.cache_start=cold).",
    ),
]


def run_cmd(
    scenario: Annotated[str, typer.Argument(help="Scenario name (ttft, throughput, ...) or YAML path.")],
    base_url: Annotated[str | None, typer.Option(help="Server root URL; absent = the embedded mock.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name; absent = first of /v1/models.")] = None,
    api: Annotated[str | None, typer.Option(help="completions or chat.")] = None,
    engine: Annotated[str | None, typer.Option(help=engine_help())] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="NAME of the env variable holding the API key (never the key).")
    ] = None,
    mock_profile: Annotated[
        str | None, typer.Option(help="Mock profile when no server is named (ci, ibm-g4, laptop, ...).")
    ] = None,
    noisy: NoisyOpt = False,
    empty_cache: EmptyCacheOpt = False,
    pairs: Annotated[
        int | None, typer.Option(help="With --noisy: quiet/noisy pairs (default 6; 2 with --empty-cache).")
    ] = None,
    baseline: Annotated[
        bool, typer.Option("--baseline", help="Throughput, sessions: also the no-reuse baseline.")
    ] = False,
    lengths: Annotated[str | None, typer.Option(help="Prompt lengths, e.g. 1000,4000,8k.")] = None,
    prompt_count: Annotated[int | None, typer.Option("--prompts", help="Distinct prompts.")] = None,
    requests: gf.RequestsOpt = None,
    concurrency: gf.ConcurrencyOpt = None,
    rate: gf.RateOpt = None,
    random_input_len: gf.InputLenOpt = None,
    num_prompts: gf.NumPromptsOpt = None,
    max_concurrency: gf.MaxConcurrencyOpt = None,
    request_rate: gf.RequestRateOpt = None,
    random_output_len: gf.RandomOutputLenOpt = None,
    repetitions: Annotated[int | None, typer.Option(help="Repeat the measurement N times.")] = None,
    max_tokens: gf.OutputLenOpt = None,
    retries: Annotated[int | None, typer.Option(help="Retries per failed request (default 0).")] = None,
    max_error_rate: Annotated[
        float | None, typer.Option(help="Failed fraction still counted a pass (default 0).")
    ] = None,
    trace: TraceOpt = None,
    dataset: DatasetOpt = None,
    dataset_format: DatasetFormatOpt = None,
    set_values: Annotated[
        list[str] | None, typer.Option("--set", help="Override any field: --set test.warm_repeats=2.")
    ] = None,
    output_dir: Annotated[Path, typer.Option(help="Where run directories go.")] = Path("results"),
    allow_unverified_cold: Annotated[
        bool, typer.Option("--allow-unverified-cold", help="Run even if a cold cache cannot be verified.")
    ] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="Skip the report at the end.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Plain, minimal output.")] = False,
    cluster: ClusterOpt = None,
    serve_metrics: ServeMetricsOpt = None,
    serve_metrics_host: ServeHostOpt = "127.0.0.1",
    arms: ArmsOpt = None,
    baseline_url: BaselineUrlOpt = None,
) -> None:
    from kvbench.scenario import parse_cluster_flag

    spelled: dict[str, str] = {}
    general = gf.General(
        gf.merge_alias("--concurrency", concurrency, "--max-concurrency", max_concurrency, spelled),
        gf.merge_alias("--requests", requests, "--num-prompts", num_prompts, spelled),
        gf.merge_alias("--rate", rate, "--request-rate", request_rate, spelled),
        random_input_len,
        gf.merge_alias("--max-tokens", max_tokens, "--random-output-len", random_output_len, spelled),
        spelled=spelled,
    )
    overrides = build_overrides(
        general=general,
        base_url=base_url,
        model=model,
        api=api,
        engine=engine,
        mock_profile=mock_profile,
        noisy=noisy,
        empty_cache=empty_cache,
        pairs=pairs,
        baseline=baseline,
        lengths=lengths,
        prompt_count=prompt_count,
        repetitions=repetitions,
        retries=retries,
        max_error_rate=max_error_rate,
        trace=trace,
        dataset=dataset,
        dataset_format=dataset_format,
        set_values=set_values,
        api_key_env=api_key_env,
        scenario=scenario,
    )
    if cluster is not None:
        overrides.update(parse_cluster_flag(cluster))
    scn = _with_dataset_trace(scenario, overrides, output_dir)
    flags: dict[str, Any] = {"output_dir": output_dir, "quiet": quiet, "report": not no_report}
    run_arms_if_asked(scenario, overrides, (arms, baseline_url), flags, allow_unverified_cold)
    serve = None if serve_metrics is None else (serve_metrics_host, serve_metrics)
    code = execute(scn, **flags, allow_unverified_cold=allow_unverified_cold, serve_metrics=serve)
    raise typer.Exit(code)


def _with_dataset_trace(scenario: str, overrides: dict[str, Any], output_dir: Path) -> Any:
    """The scenario; a replay given a dataset replays it as its trace (kvbench.datasets.as_trace)."""
    from kvbench.scenario import load_scenario

    scn, _ = load_scenario(scenario, overrides)
    p = scn.prompts
    if p.dataset is not None and scn.test.kind == "replay":
        from kvbench.datasets.as_trace import replay_overrides

        overrides.update(replay_overrides(p.dataset, p.dataset_format, output_dir, scn.output.max_tokens))
        scn, _ = load_scenario(scenario, overrides)
    elif p.dataset is not None:  # a bad file is one line before any server is started
        from kvbench.datasets import open_dataset

        open_dataset(p.dataset, p.dataset_format, p.count)
    return scn


def validate_cmd(
    scenario: Annotated[str, typer.Argument(help="Scenario name or YAML path.")],
    set_values: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE.")
    ] = None,
) -> None:
    """Validate a scenario and print it fully resolved (defaults filled in), or one line per problem."""
    from kvbench.run.preflight.names import check_names
    from kvbench.scenario import load_scenario, scenario_to_yaml

    scn, path = load_scenario(scenario, _parse_set(set_values or []))
    check_names(scn)
    typer.echo(f"# resolved from {path}")
    typer.echo(scenario_to_yaml(scn), nl=False)


def export_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    format: Annotated[str, typer.Option("--format", "-f", help="csv or parquet.")] = "csv",
    out: Annotated[Path | None, typer.Option(help="Output file (default: RUN_DIR/requests.<ext>).")] = None,
) -> None:
    """Export a run's requests as CSV or Parquet (one row per request)."""
    from kvbench.results.export import export_requests

    rows, target = export_requests(run_dir, format, out)
    typer.echo(f"{rows} rows -> {target}")


def register(app: typer.Typer) -> None:
    app.command("run", help=RUN_HELP + "\n" + gf.mapping_help())(run_cmd)
    app.command("validate")(validate_cmd)
    app.command("export")(export_cmd)


def execute(
    scn: Any,
    *,
    output_dir: Path,
    quiet: bool,
    allow_unverified_cold: bool,
    report: bool,
    serve_metrics: tuple[str, int] | None = None,
) -> int:
    import contextlib

    opts_metrics = None
    with contextlib.ExitStack() as stack:
        if serve_metrics is not None:  # up through the report too: a scrape after the last row sees it
            from kvbench.telemetry.serve_metrics import RunMetrics

            opts_metrics = RunMetrics()
            url = stack.enter_context(opts_metrics.serve(*serve_metrics))
            print(f"kvbench: metrics at {url}", file=sys.stderr, flush=True)
        return _execute(scn, output_dir, quiet, allow_unverified_cold, report, opts_metrics)


def _execute(
    scn: Any, output_dir: Path, quiet: bool, allow_unverified_cold: bool, report: bool, metrics: Any
) -> int:
    import asyncio

    from kvbench.run.runner import RunOptions, RunOutcome, run_scenario

    opts = RunOptions(
        output_dir=output_dir,
        quiet=quiet,
        allow_unverified_cold=allow_unverified_cold,
        report=report,
        metrics=metrics,
    )
    try:
        import uvloop

        runner_factory: Any = uvloop.new_event_loop
    except ModuleNotFoundError:
        runner_factory = None
    try:
        with asyncio.Runner(loop_factory=runner_factory) as runner:
            outcome = runner.run(run_scenario(scn, opts))
    except (KeyboardInterrupt, asyncio.CancelledError):
        outcome = RunOutcome(None, "interrupted", 130, {}, 0)
    if outcome.status == "interrupted" or outcome.run_dir is None:
        if outcome.run_dir is not None:
            print(f"kvbench: interrupted; finished requests are in {outcome.run_dir}", file=sys.stderr)
            print(f"kvbench: `kvbench report {outcome.run_dir}` still works on it", file=sys.stderr)
        else:
            print("kvbench: interrupted", file=sys.stderr)
        return 130
    for line in outcome.summary_lines:
        print(line)
    if report:
        from kvbench.report.render import write_report

        try:
            html = write_report(outcome.run_dir, quiet=quiet)
        except OSError as exc:  # a disk that filled after the run: one line naming the file, exit 1
            from kvbench.results.files import WriteFailed

            raise WriteFailed(Path(exc.filename or outcome.run_dir), exc) from None
        if quiet:
            print(f"report: {html}")
    print(f"results: {outcome.run_dir}")
    if outcome.exit_code:
        print(f"kvbench: {outcome.failure} (exit 1)", file=sys.stderr)
    return outcome.exit_code
