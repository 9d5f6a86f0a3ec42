"""`kvbench fit --validate RUN...`: predict each given run of the real system on the twin, and the error.

Each RUN's own saved scenario (scenario.yaml) is run again against the embedded mock serving the
twin (`--mock-profile TWIN`, pace cleared: a twin runs in real time), in a child `kvbench run` so
the twin's run is an ordinary run directory (and `kvbench` stays layered: the twin never imports
the runner). Then both runs are read through `kvbench.results` and set side by side per row label
(cold / warm for a TTFT run, cached / baseline for throughput, quiet / noisy, a replay's arms):
req/s, TTFT p50 and p99, hit ratio (cached / prompt tokens) and goodput at the scenario's SLO.
The rows go into the twin profile's `fit.validation`, so every later run on it reports the error
to expect.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.results import SCENARIO, load_record, load_run

NOT_MEASURED = frozenset({"probe", "fill", "filler", "prime"})
SEQUENTIAL_PHASES = frozenset({"ttft"})  # one request at a time: a req/s says nothing
# what a twin's run needs changed in a real system's scenario: the embedded mock, the twin, real time
TWIN_SETS = (
    "target.base_url=null",
    "target.mock_overrides={}",
    "target.engine=auto",
    "target.api_key_env=null",
)
RUN_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Row:
    run: str
    label: str
    metric: str
    measured: float | None
    predicted: float | None
    other_system: bool = False  # the run measured another system (engine, pace): not the twin's error

    @property
    def error_pct(self) -> float | None:
        if self.measured is None or self.predicted is None or self.measured == 0:
            return None
        return (self.predicted - self.measured) / abs(self.measured) * 100.0

    def as_dict(self) -> dict[str, float | str | None]:
        err = self.error_pct
        return {
            "run": self.run,
            "label": self.label,
            "metric": self.metric,
            "measured": self.measured,
            "predicted": self.predicted,
            "error_pct": None if err is None else round(err, 2),
            "other_system": self.other_system,
        }


def predict(run_dir: Path, twin: Path, out: Path, quiet: bool = True) -> Path:
    """Run `run_dir`'s saved scenario on the twin; the new run directory (UsageError on failure)."""
    scenario = run_dir / SCENARIO
    if not scenario.is_file():
        raise UsageError(f"--validate {run_dir}: no {SCENARIO} (not a run directory)")
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "kvbench", "run", str(scenario), "--mock-profile", str(twin)]
    for s in TWIN_SETS:
        argv += ["--set", s]
    argv += ["--output-dir", str(out), "--no-report", "--quiet"]
    before = {p.name for p in out.iterdir()}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    made = sorted(p for p in out.iterdir() if p.name not in before and p.is_dir())
    if proc.returncode != 0 or not made:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--validate {run_dir}: the twin's run failed (exit {proc.returncode}): {last}")
    return made[-1]


def _pct(values: Any, q: float) -> float | None:
    vals = sorted(float(v) for v in values if isinstance(v, int | float) and math.isfinite(v))
    if not vals:
        return None
    k = (len(vals) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def figures(run_dir: Path, slo: dict[str, float] | None = None) -> dict[tuple[str, str], float | None]:
    """(row label, metric) -> value, over the run's measured rows."""
    df = load_run(run_dir)
    phases = load_record(run_dir).manifest.phases
    durations = {p.name: p.duration_s for p in phases if p.label not in SEQUENTIAL_PHASES}
    if df.empty:
        return {}
    rows = df[~df["label"].isin(NOT_MEASURED) & (df["phase"] != "probe")]
    out: dict[tuple[str, str], float | None] = {}
    for label, group in rows.groupby("label", sort=False):
        ok = group[group["status"] == "ok"]
        name = str(label)
        out[(name, "TTFT p50 ms")] = _pct(ok["ttft_ms"], 0.5)
        out[(name, "TTFT p99 ms")] = _pct(ok["ttft_ms"], 0.99)
        tokens = ok["prompt_tokens_server"].fillna(ok["prompt_tokens"]).sum()
        out[(name, "hit ratio")] = float(ok["cached_tokens"].fillna(0).sum() / tokens) if tokens else None
        span = sum(d or 0.0 for p, d in durations.items() if p in set(group["phase"]))
        if span > 0:
            out[(name, "req/s")] = len(ok) / span
            if slo:
                from kvbench.report.core.goodput import point_metrics

                records: list[dict[str, Any]] = [
                    {str(k): v for k, v in r.items()} for r in group.to_dict("records")
                ]
                m = point_metrics(records, span, slo)
                out[(name, "goodput req/s")] = m.goodput_rps
    return out


def compare(run_dir: Path, twin_run: Path, other_system: bool = False) -> list[Row]:
    """Measured vs predicted, per label and metric, in the measured run's order."""
    from kvbench.report.slo_section import saved_slo

    slo = saved_slo(run_dir)
    measured, predicted = figures(run_dir, slo), figures(twin_run, slo)
    return [
        Row(str(run_dir), label, metric, value, predicted.get((label, metric)), other_system)
        for (label, metric), value in measured.items()
    ]


def same_system(run_dir: Path, source: dict[str, Any]) -> str | None:
    """Why `run_dir` measured another system than the twin's source (None: nothing says so)."""
    target = load_record(run_dir).manifest.target
    if not source:
        return None
    if source.get("engine") not in (None, target.engine):
        return f"{run_dir}: engine {target.engine}, the twin was fitted to {source.get('engine')}"
    pace = float(target.mock_time_scale or 1.0)
    fitted = source.get("pace")
    if isinstance(fitted, int | float) and abs(pace - fitted) > 1e-6 * max(pace, fitted):
        return (
            f"{run_dir}: the mock ran at pace {pace:g}, the twin was fitted at pace {fitted:g}: another "
            "system (every modelled time differs by the ratio), so its errors say nothing of the twin"
        )
    return None


def validate(
    twin: Path, run_dirs: list[Path], out: Path, source: dict[str, Any]
) -> tuple[list[Row], list[str]]:
    """Rows of every run, and a warning per run that measured another system than the twin's."""
    rows: list[Row] = []
    warnings: list[str] = []
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise UsageError(f"--validate {run_dir}: no such run directory")
        why = same_system(run_dir, source)
        if why is not None:
            warnings.append(f"warning: {why}")
        rows += compare(run_dir, predict(run_dir, twin, out), other_system=why is not None)
    return rows, warnings


def table_lines(rows: list[Row]) -> list[str]:
    """The error table for the console, one line per (run, label, metric)."""

    def f(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.4g}"

    head = f"{'run':<28} {'label':<14} {'metric':<14} {'measured':>10} {'predicted':>10} {'error':>8}"
    lines = [head]
    for r in rows:
        err = r.error_pct
        lines.append(
            f"{Path(r.run).name[-28:]:<28} {r.label:<14} {r.metric:<14} {f(r.measured):>10} "
            f"{f(r.predicted):>10} {'n/a' if err is None else f'{err:+.1f}%':>8}"
        )
    return lines
