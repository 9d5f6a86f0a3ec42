"""`kvbench trace analyze|synth`: look at a trace offline, or write one from controls.

Thin: parse, call one function, print. numpy and matplotlib load inside the commands, so that
`kvbench --help` stays instant; nothing here talks to a server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvbench.errors import UsageError, file_errors

# Each paragraph is one line (the help formatter keeps line breaks and re-wraps to the terminal).
ANALYZE_HELP = "\n\n".join(
    [
        "Analyse a trace offline: hit rates (ideal and LRU tiers), reuse distance, working set.",
        "Prints rows, tokens and unique blocks too. The ideal hit rate is what an unbounded prefix cache "
        "would hit (a row's leading blocks seen before). With --tiers (and --model to size a block) or "
        "--mock-profile, a tiered LRU cache is simulated with the same rules as kvbench's mock. "
        "--out DIR writes analysis.json and PNG plots.",
        "  kvbench trace analyze scenarios/traces/mooncake-like.jsonl.gz",
        "  kvbench trace analyze t.jsonl --model gpt-oss-120b --tiers G1=80GB,G2=1TB --out ana/",
        "  kvbench trace analyze t.jsonl.gz --mock-profile laptop --json",
    ]
)

SYNTH_HELP = "\n\n".join(
    [
        "Write a seeded synthetic trace (Mooncake JSONL unless --format says otherwise).",
        "Conversations arrive (Poisson or gamma), may start with a shared system prompt and carry a "
        "Zipf-popular document, and run one or more turns with think time; each turn's prompt is the "
        "conversation so far plus a new message, so the hash ids share prefixes as real traffic does.",
        "Controls come from --controls (a YAML file, or a shipped name: mooncake-like, ci), then "
        "--set KEY=VALUE (any control, dotted, e.g. documents.zipf_s=1.2), then the flags below. "
        "A name ending in .gz is written gzipped. The same controls and seed give the same bytes.",
        "  kvbench trace synth -o my.jsonl --rows 2000 --set documents.count=300 --set sessions.share=0.3",
        "  kvbench trace synth -o mooncake-like.jsonl.gz --controls mooncake-like",
    ]
)


def _controls(path: str | None, sets: list[str], flags: dict[str, Any]) -> Any:
    from kvbench.configfile import Raw, apply_overrides, parse_set, read_yaml, validate
    from kvbench.traces.controls import SynthControls

    data: dict[str, Any] = {}
    source = "controls"
    if path is not None:
        file = _controls_file(path)
        data, source = read_yaml(file), str(file)
    overrides: dict[str, Any] = {k: Raw(v) for k, v in parse_set(sets).items()}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    return validate(SynthControls, apply_overrides(data, overrides, SynthControls), source)


def _controls_file(spec: str) -> Path:
    path = Path(spec)
    if path.is_file():
        return path
    shipped = Path(__file__).resolve().parent.parent / "scenarios" / "traces" / f"{spec}.synth.yaml"
    if shipped.is_file():
        return shipped
    names = sorted(p.name[: -len(".synth.yaml")] for p in shipped.parent.glob("*.synth.yaml"))
    raise UsageError(f"--controls: {spec!r} is neither a file nor a shipped control set ({', '.join(names)})")


def synth_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Trace file to write (.gz: gzipped).")],
    controls: Annotated[
        str | None,
        typer.Option("--controls", help="YAML file of controls, or a shipped name (mooncake-like, ci)."),
    ] = None,
    set_values: Annotated[
        list[str] | None, typer.Option("--set", help="KEY=VALUE for any control (dotted), repeatable.")
    ] = None,
    rows: Annotated[int | None, typer.Option(help="Rows to write.")] = None,
    duration_s: Annotated[
        float | None, typer.Option("--duration-s", help="Stop after this much trace time.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (numpy default_rng).")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="mooncake (default), bailian or weka.")] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="New conversations per second.")] = None,
) -> None:
    from kvbench.traces.synth import synthesize, write_trace

    flags = {"rows": rows, "duration_s": duration_s, "seed": seed, "format": fmt, "arrival.rate_per_s": rate}
    c = _controls(controls, set_values or [], flags)
    with file_errors():
        n = write_trace(synthesize(c), out, c.format)
    print(f"wrote {n:,} rows to {out} ({c.format}, seed {c.seed})")


def analyze_command(
    file: Annotated[Path, typer.Argument(help="Trace file (.jsonl or .jsonl.gz).")],
    fmt: Annotated[str, typer.Option("--format", help="auto, mooncake, bailian or weka.")] = "auto",
    block_tokens: Annotated[
        int | None, typer.Option("--block-tokens", help="Tokens per hash id (default: the format's).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="KV geometry preset or config.json, to size blocks in bytes."),
    ] = None,
    tiers: Annotated[
        str | None, typer.Option("--tiers", help="LRU tier capacities, e.g. G1=80GB,G2=1TB (needs --model).")
    ] = None,
    mock_profile: Annotated[
        str | None, typer.Option("--mock-profile", help="Take the tiers and geometry from a mock profile.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Folder for analysis.json and the PNG plots.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the analysis as JSON instead of the table.")
    ] = False,
    window_s: Annotated[
        float, typer.Option("--window-s", help="Working-set window, seconds of trace time.")
    ] = 60.0,
) -> None:
    from kvbench.traces.analyze import analyze_trace
    from kvbench.traces.reader import open_trace
    from kvbench.traces.render import render_table

    if window_s <= 0:
        raise UsageError(f"--window-s: must be > 0, got {window_s:g}")
    if out is not None:  # before the pass over the trace, which may take minutes
        with file_errors():
            out.mkdir(parents=True, exist_ok=True)
    trace = open_trace(file, format=fmt, block_tokens=block_tokens)
    plan, block_bytes = _plan(trace.block_tokens, model, tiers, mock_profile)
    a = analyze_trace(
        trace,
        path=str(file),
        format=trace.format,
        block_tokens=trace.block_tokens,
        plan=plan,
        window_s=window_s,
    )
    doc = a.to_dict() | {"block_bytes": block_bytes}
    if out is not None:
        from kvbench.results.files import write_json_atomic
        from kvbench.traces.plots import write_plots

        with file_errors():
            write_json_atomic(out / "analysis.json", doc)
            written = write_plots(a, out, block_bytes)
    print(json.dumps(doc, indent=2) if as_json else render_table(a, block_bytes))
    if out is not None and not as_json:
        print(f"\nwrote {out / 'analysis.json'} and {len(written)} plots to {out}")


def _plan(
    block_tokens: int, model: str | None, tiers: str | None, profile: str | None
) -> tuple[Any, float | None]:
    """The LRU tier plan (or None) and the bytes of one block (None without a model)."""
    from kvbench.model.geometry import resolve_geometry
    from kvbench.traces.sizing import block_bytes, plan_from_profile, plan_from_tiers

    if profile is not None:
        if tiers is not None or model is not None:
            raise UsageError("--mock-profile: gives the tiers and the model; drop --tiers and --model")
        plan = plan_from_profile(profile, block_tokens)
        return plan, plan.block_bytes
    if tiers is not None:
        if model is None:
            raise UsageError(
                "--tiers: needs --model (a geometry preset or config.json) to size a block in bytes"
            )
        plan = plan_from_tiers(tiers, model, block_tokens)
        return plan, plan.block_bytes
    if model is not None:
        return None, block_bytes(resolve_geometry(model), block_tokens)
    return None, None


def build_app() -> typer.Typer:
    trace_app = typer.Typer(
        name="trace",
        help="Traces offline: analyse one (hit rates, LRU tiers, reuse) or synthesise one (seeded). "
        "Replay one with `kvbench run replay --trace FILE`.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    trace_app.command("analyze", help=ANALYZE_HELP)(analyze_command)
    trace_app.command("synth", help=SYNTH_HELP)(synth_command)
    return trace_app


def register(app: typer.Typer) -> None:
    """Mount `trace` (analyze, synth) on the kvbench CLI."""
    app.add_typer(build_app(), name="trace")
