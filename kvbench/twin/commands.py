"""`kvbench fit`: read the runs, fit the twin, write its profile YAML and print what was fitted."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from kvbench.twin.build import Twin

FIT_HELP = """Fit a mock profile (a twin) to your own runs, then run any scenario on it.

\b
  kvbench run ttft --base-url http://127.0.0.1:8000 --lengths 1k,4k,8k,16k
  kvbench fit results/<that run> -o my-twin.yaml
  kvbench run throughput --mock-profile ./my-twin.yaml --set target.mock_overrides={}
  kvbench fit results/<that run> -o my-twin.yaml --validate results/<a throughput run>
  kvbench fit --base-url http://127.0.0.1:8000 --budget-s 120 --concurrencies 1,2,4,8

A TTFT run's cold rows give the prefill cost (a*n + c*n^2 + fixed), its warm rows the serving tier's
onboarding latency and bandwidth (as G4), its inter-token times the decode step. Fit quality (R^2,
residuals, points) and the ranges the fit holds for go into the profile's `fit:` section. Under
load the twin schedules in steps (a token budget per step, a sequence limit, a fixed cost per
request): give your server's with --step-budget / --max-seqs, else the engine's defaults are assumed
and said so; throughput runs given beside the sweep fit the sequence limit (the server's gauges, else
the step model's replay of their load). --base-url URL measures the sweep and a throughput run per
--concurrencies itself, within --budget-s, under --runs-dir (--api-key-env NAME: the key by name).
--validate RUN runs RUN's scenario on the twin and prints the error per metric. The twin
runs in real time: clear a scenario's pace override (ttft sets time_scale 0.1) with
--set target.mock_overrides={}.
"""


BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="Measure this server first: a short TTFT sweep and a throughput run per --concurrencies, "
        "within --budget-s, under --runs-dir; fitted with any RUN_DIRS given.",
    ),
]
BudgetOpt = Annotated[float, typer.Option("--budget-s", help="With --base-url: seconds for all the runs.")]
ConcOpt = Annotated[
    str, typer.Option("--concurrencies", help="With --base-url: connections per throughput run.")
]
LengthsOpt = Annotated[
    str, typer.Option("--lengths", help="With --base-url: the TTFT sweep's prompt lengths.")
]
RunsDirOpt = Annotated[Path, typer.Option("--runs-dir", help="With --base-url: where its runs are written.")]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-env", help="With --base-url: NAME of the env variable holding the API key (never the key)."
    ),
]


def fit_cmd(
    run_dirs: Annotated[
        list[Path] | None, typer.Argument(help="Run directories (a TTFT run; throughput runs too).")
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile YAML to write.")] = Path(
        "twin.yaml"
    ),
    base: Annotated[
        str, typer.Option(help="Mock profile the twin starts from (its shape and knobs).")
    ] = "ibm-g4",
    model: Annotated[
        str | None, typer.Option(help="KV geometry preset (bytes per token); default: the base's.")
    ] = None,
    step_budget: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Tokens per scheduler step of your server (vLLM --max-num-batched-tokens, llama.cpp "
            "--batch-size); default: the engine's as kvbench engines serve starts it.",
        ),
    ] = None,
    max_seqs: Annotated[
        int | None,
        typer.Option(
            min=1, help="Sequences your server runs at once (vLLM --max-num-seqs, llama.cpp -np slots)."
        ),
    ] = None,
    validate: Annotated[
        list[Path] | None,
        typer.Option(
            "--validate",
            help="A run of the real system to predict on the twin and compare (repeat for more); the "
            "errors go into the profile's fit.validation.",
        ),
    ] = None,
    twin_path: Annotated[
        Path | None,
        typer.Option("--twin", help="Validate this existing twin instead of fitting one (needs --validate)."),
    ] = None,
    validate_dir: Annotated[Path, typer.Option(help="Where the twin's prediction runs go.")] = Path(
        "results/twin-validation"
    ),
    base_url: BaseUrlOpt = None,
    budget_s: BudgetOpt = 120.0,
    concurrencies: ConcOpt = "1,2,4,8",
    lengths: LengthsOpt = "1000,4000,8000",
    runs_dir: RunsDirOpt = Path("results/fit"),
    api_key_env: KeyOpt = None,
) -> None:
    from kvbench.errors import UsageError

    if twin_path is not None:
        if not validate:
            raise UsageError("--twin: name the runs to predict with --validate RUN")
        if run_dirs:
            raise UsageError("--twin validates an existing twin: give run directories with --validate only")
        _validate(twin_path, list(validate), validate_dir)
        return
    run_dirs = list(run_dirs or [])
    if api_key_env is not None and base_url is None:
        raise UsageError("--api-key-env: only with --base-url (the runs named are read, not rerun)")
    if base_url is not None:
        from kvbench.twin.acquire import Plan, acquire, parse_counts

        sizes = parse_counts("--lengths", lengths, scale_k=True)
        conns = parse_counts("--concurrencies", concurrencies)
        run_dirs += acquire(Plan(base_url, sizes, conns, budget_s, runs_dir, api_key_env))
    if not run_dirs:
        raise UsageError("kvbench fit: name at least one run directory (or measure one: --base-url URL)")
    from kvbench.twin.build import build_twin
    from kvbench.twin.sources import read_runs

    twin = build_twin(read_runs(run_dirs), base, model, None, step_budget, max_seqs)
    twin.profile["name"] = output.stem
    _write(output, twin.profile)
    for line in summary_lines(twin, output, base):
        print(line)
    if validate:
        _validate(output, list(validate), validate_dir)


def _write(path: Path, profile: dict[str, Any]) -> None:
    from kvbench.errors import file_errors
    from kvbench.results.files import write_text_atomic

    with file_errors():
        write_text_atomic(path, render_yaml(profile))


def _validate(twin: Path, runs: list[Path], out: Path) -> None:
    """Predict each run on the twin, print the error table, keep it in the profile's fit.validation."""
    from kvbench.configfile import read_yaml
    from kvbench.errors import UsageError
    from kvbench.twin.validate import table_lines, validate

    if not twin.is_file():
        raise UsageError(f"--twin {twin}: no such profile file")
    profile = read_yaml(twin)
    if not isinstance(profile, dict) or not isinstance(profile.get("fit"), dict):
        raise UsageError(f"--twin {twin}: not a twin (no fit: section; write one with kvbench fit)")
    print(f"validating {twin} against {len(runs)} run(s): each run's scenario on the twin ...")
    rows, warnings = validate(twin, runs, out, profile["fit"].get("source") or {})
    profile["fit"]["validation"] = [r.as_dict() for r in rows]
    _write(twin, profile)
    print("\n".join([*warnings, *table_lines(rows)]))
    print(f"validation written to {twin} (fit.validation); the twin's runs: {out}")


def render_yaml(profile: dict[str, Any]) -> str:
    import yaml

    head = (
        "# A twin written by `kvbench fit`: a mock profile fitted to the runs under fit.runs.\n"
        "# Run it: kvbench run SCENARIO --mock-profile THIS_FILE --set target.mock_overrides={}\n"
        "# What-if: --set target.mock_overrides='{tiers.G4.read_bandwidth_bytes_per_s: ...}'\n"
    )
    return head + yaml.safe_dump(profile, sort_keys=False, width=100)


def _q(term: dict[str, Any]) -> str:
    r2 = term.get("r2")
    r2_text = "n/a" if r2 is None else f"{r2:.4f}"
    return (
        f"R^2 {r2_text}, {term['points']} points, rmse {term['rmse_s'] * 1e3:.3g} ms, "
        f"worst {term['max_rel_residual'] * 100:.1f}%"
    )


def summary_lines(twin: Twin, output: Path, base: str) -> list[str]:
    fit = twin.profile["fit"]
    t, v = fit["terms"], fit["valid"]
    p = t["prefill"]
    lines = [
        f"twin: {output} (from {len(fit['runs'])} run(s), base shape {base})",
        f"  prefill  a={p['a_s_per_token']:.4g} s/token  c={p['c_s_per_token2']:.4g} s/token^2  "
        f"fixed={p['fixed_s'] * 1e3:.3g} ms   {_q(p)}",
    ]
    if "onboard" in t:
        o = t["onboard"]
        bw = o["bandwidth_bytes_per_s"]
        bw_text = "unbounded" if bw is None else f"{bw / 1e9:.4g} GB/s"
        lines.append(f"  onboard  latency={o['latency_s'] * 1e3:.3g} ms  bandwidth={bw_text}   {_q(o)}")
    if "decode" in t:
        d = t["decode"]
        lines.append(f"  decode   step={d['step_base_s'] * 1e3:.3g} ms + KV/HBM   {_q(d)}")
    cached = f", cached {v['cached_tokens_min']}-{v['cached_tokens_max']}" if v["cached_tokens_max"] else ""
    lines.append(
        f"  valid for prompts {v['prompt_tokens_min']}-{v['prompt_tokens_max']} tokens{cached}, "
        f"up to {v['concurrency_max']} connection(s)"
    )
    if "scheduler" in t:
        s = t["scheduler"]
        steps = "processor sharing" if s["token_budget"] is None else f"steps of {s['token_budget']} tokens"
        lines.append(
            f"  scheduler {steps}, {s['max_num_seqs']} sequences, fixed {s['request_fixed_s'] * 1e3:.3g} ms "
            f"per request ({s['token_budget_from']})"
        )
    if "max_num_seqs" in t:
        m = t["max_num_seqs"]
        res = "" if m["residual"] is None else f", residual {m['residual'] * 100:.1f}% (req/s, TTFT p50)"
        lines.append(f"  seq limit {m['value']} from {m['origin']}: {m['detail']}{res}")
    if "speed" in t:
        sp = t["speed"]
        res = "" if sp["residual"] is None else f", residual {sp['residual'] * 100:.1f}% (req/s)"
        lines.append(f"  compute  {sp['value']:.3g}x the sweep's, from {sp['origin']}: {sp['detail']}{res}")
    lines += [f"  note: {n}" for n in fit["notes"]]
    lines.append(f"run on it: kvbench run ttft --mock-profile {output} --set target.mock_overrides={{}}")
    return lines


def register(app: typer.Typer) -> None:
    app.command("fit", help=FIT_HELP)(fit_cmd)
