"""`kvbench fit --base-url URL`: measure the points the fit needs on the server itself, in a time budget.

Two kinds of run, each a child `kvbench run` (so the twin stays below the runner, as validate.py
does) writing an ordinary run directory under `--runs-dir`:
  1. a short TTFT sweep (cold and warm at each of `--lengths`): the prefill, onboarding and decode fits
  2. a short closed-loop throughput run at each of `--concurrencies`, its /metrics sampled every
     0.1 s: the sequence limit (kvbench.twin.seqlimit: the server's gauges, else the step model)
The budget bounds the whole: the sweep gets what is left, and a throughput run starts only when the
sweep's time per request says it fits in what remains (it is stopped at the budget all the same).
The API key travels as the NAME of its environment variable (`--api-key-env`), never its value: the
children read it from the environment, and their error lines are redacted before they are printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvbench.errors import UsageError
from kvbench.redact import redact_text

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TELEMETRY_SETS = ("telemetry.interval_s=0.1", "telemetry.host=false")  # gauges often enough for short runs
STARTUP_S = 5.0  # a child run's own start (imports, preflight, reset): counted against the budget
MIN_REQUESTS = 8  # per throughput run: a queue needs a few requests beyond the connections to show


@dataclass(frozen=True)
class Plan:
    base_url: str
    lengths: tuple[int, ...]
    concurrencies: tuple[int, ...]
    budget_s: float
    runs_dir: Path
    api_key_env: str | None = None
    model: str | None = None
    max_tokens: int = 16


def parse_counts(flag: str, text: str, scale_k: bool = False) -> tuple[int, ...]:
    """'1,2,4,8' (or '1k,4k' where `scale_k`) as positive integers; one UsageError line naming the flag."""
    try:
        values = tuple(
            int(x.strip().lower().replace("_", "").replace("k", "000") if scale_k else x.strip())
            for x in text.split(",")
            if x.strip()
        )
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected positive integers separated by commas") from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"{flag} {text!r}: expected positive integers separated by commas")
    return tuple(sorted(set(values)))


def check(plan: Plan) -> None:
    """One line naming the flag for what cannot work (before any request is sent)."""
    if not re.match(r"^https?://[^/\s]+", plan.base_url):
        raise UsageError(f"--base-url {redact_text(plan.base_url)!r}: expected http://HOST[:PORT]")
    if plan.budget_s <= 0:
        raise UsageError(f"--budget-s {plan.budget_s:g}: must be positive")
    if len(plan.lengths) < 2:
        raise UsageError("--lengths: the prefill fit needs at least two distinct prompt lengths")
    if plan.api_key_env is not None:
        if not ENV_NAME.fullmatch(plan.api_key_env):
            raise UsageError(f"--api-key-env {plan.api_key_env!r}: the NAME of an environment variable")
        if not os.environ.get(plan.api_key_env):
            raise UsageError(f"--api-key-env {plan.api_key_env}: not set in the environment")


def _common(plan: Plan) -> list[str]:
    argv = ["--base-url", plan.base_url, "--quiet", "--no-report", "--max-tokens", str(plan.max_tokens)]
    if plan.api_key_env:
        argv += ["--api-key-env", plan.api_key_env]
    if plan.model:
        argv += ["--model", plan.model]
    for s in TELEMETRY_SETS:
        argv += ["--set", s]
    return argv


def _child(argv: list[str], out: Path, timeout_s: float, plan: Plan) -> Path | str:
    """Run `kvbench run ...`; its new run directory, or why there is none (one redacted line)."""
    out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in out.iterdir()}
    full = [sys.executable, "-m", "kvbench", "run", *argv, "--output-dir", str(out)]
    key = os.environ.get(plan.api_key_env or "") if plan.api_key_env else None
    try:
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"stopped at the budget ({timeout_s:.0f} s left)"
    made = sorted(p for p in out.iterdir() if p.name not in before and p.is_dir())
    if proc.returncode != 0 or not made:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        return redact_text(f"exit {proc.returncode}: {last}", (key,) if key else ())
    return made[-1]


def acquire(plan: Plan, say: Callable[[str], None] = print) -> list[Path]:
    """Measure the TTFT sweep and the throughput runs; their run directories (UsageError: no sweep)."""
    check(plan)
    t0 = time.monotonic()

    def left() -> float:
        return plan.budget_s - (time.monotonic() - t0)

    lengths = ",".join(str(n) for n in plan.lengths)
    say(f"fit: measuring {redact_text(plan.base_url)} within {plan.budget_s:g} s; runs under {plan.runs_dir}")
    say(f"fit: TTFT sweep, cold and warm at {lengths} tokens ...")
    sweep = _child(["ttft", "--lengths", lengths, *_common(plan)], plan.runs_dir, left(), plan)
    if isinstance(sweep, str):
        raise UsageError(f"--base-url: the TTFT sweep failed ({sweep})")
    took = plan.budget_s - left()
    per_request = max(took - STARTUP_S, 0.0) / (2 * len(plan.lengths))
    say(f"fit: TTFT sweep done in {took:.1f} s ({sweep})")
    runs = [sweep]
    mid = plan.lengths[len(plan.lengths) // 2]
    for c in plan.concurrencies:
        requests = max(MIN_REQUESTS, 3 * c)
        # at worst one request at a time (a limit of 1): the budget must hold that
        need = STARTUP_S + requests * per_request
        if need > left():
            say(f"fit: skipped {c} connection(s): ~{need:.0f} s needed, {max(left(), 0):.0f} s left")
            continue
        say(f"fit: throughput at {c} connection(s), {requests} requests of {mid} tokens ...")
        argv = ["throughput", "--concurrency", str(c), "--requests", str(requests), "--prompts", str(c),
                "--lengths", str(mid), *_common(plan)]  # fmt: skip
        run = _child(argv, plan.runs_dir, left(), plan)
        if isinstance(run, str):
            say(f"fit: throughput at {c} connection(s) left out ({run})")
            continue
        say(f"fit: throughput at {c} connection(s) done ({run})")
        runs.append(run)
    say(f"fit: measured in {plan.budget_s - left():.1f} s; fitting {len(runs)} run(s)")
    return runs
