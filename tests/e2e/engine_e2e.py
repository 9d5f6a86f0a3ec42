"""Helpers for the engine e2e tests: the kvbench CLI as a user runs it, and run-directory checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


CAPTURE: list[Any] = []  # pytest's capture manager, set by conftest.pytest_configure


def say(line: str) -> None:
    """Print past pytest's capture: a 10-minute build must show progress while it runs."""
    if CAPTURE:
        with CAPTURE[0].global_and_fixture_disabled():
            print(f"[e2e] {line}", file=sys.stderr, flush=True)
    else:
        print(f"[e2e] {line}", file=sys.stderr, flush=True)


def kvbench_run(scenario: str, base_url: str, out: Path, *extra: str, timeout: float = 900) -> Path:
    """`kvbench run SCENARIO --base-url URL` as a user would type it; returns the run directory."""
    cmd = [sys.executable, "-m", "kvbench", "run", scenario, "--base-url", base_url,
           "--output-dir", str(out), "--no-report", "--quiet", *extra]  # fmt: skip
    say("$ kvbench " + " ".join(cmd[3:]))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines()[-12:]:
        say("  " + line)
    assert proc.returncode == 0, (
        f"kvbench run exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    return runs[0]


class Run:
    """A finished run directory, read as plain JSON (the documented run format)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest: dict[str, Any] = json.loads((path / "manifest.json").read_text())
        self.requests: list[dict[str, Any]] = [
            json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines() if line.strip()
        ]
        deltas = path / "metrics_deltas.json"
        self.deltas: dict[str, dict[str, float]] = json.loads(deltas.read_text()) if deltas.exists() else {}

    def rows(self, **match: Any) -> list[dict[str, Any]]:
        return [r for r in self.requests if all(r.get(k) == v for k, v in match.items())]

    def cached_sum(self, phase: str) -> int:
        return sum(int(r["cached_tokens"] or 0) for r in self.rows(phase=phase))

    def delta(self, phase: str, name: str) -> float:
        return sum(v for k, v in self.deltas[phase].items() if k == name or k.startswith(name + "{"))


def check_all_ok(run: Run) -> None:
    assert run.manifest["status"] == "complete", run.manifest.get("error")
    bad = [(r["label"], r["error_type"], r["error_message"]) for r in run.requests if r["status"] != "ok"]
    assert not bad, f"failed requests: {bad[:5]}"
    assert all(r["output_tokens"] for r in run.requests), "a request generated nothing"


def check_ttft(
    run: Run, *, warm_label: str = "warm", min_speedup: float = 3.0, block: int = 1
) -> dict[str, float]:
    """Cold is verified cold, warm hits >= 90% of the prompt, warm TTFT several times below cold.

    `block`: the engine caches whole blocks (vLLM CPU: 128 tokens), so a warm request must hit every
    complete block before its last token, and 90% of the prompt once it is at least 10 blocks long.
    """
    check_all_ok(run)
    cold_start = run.manifest.get("cold_start", {})
    assert cold_start.get("verified") is True, cold_start
    colds = run.rows(phase="ttft", label="cold")
    warms = run.rows(phase="ttft", label=warm_label)
    assert colds and warms, {r["label"] for r in run.requests}
    for c in colds:
        assert c["cached_tokens"] == 0, f"cold request had cached_tokens={c['cached_tokens']}"
    for w in warms:
        assert w["cached_tokens"] is not None and w["prompt_tokens_server"]
        n = w["prompt_tokens_server"]
        assert w["cached_tokens"] >= (n - 1) // block * block, (w["cached_tokens"], n)
        if n >= 10 * block:
            assert w["cached_tokens"] >= 0.9 * n, (w["cached_tokens"], n)
    longest = max(c["prompt_tokens_requested"] for c in colds)
    cold = min(c["ttft_ms"] for c in colds if c["prompt_tokens_requested"] == longest)
    warm = min(w["ttft_ms"] for w in warms if w["prompt_tokens_requested"] == longest)
    say(
        f"{run.manifest['scenario_name']}: {longest} tokens cold {cold:.1f} ms, "
        f"{warm_label} {warm:.1f} ms ({cold / warm:.1f}x)"
    )
    assert cold >= min_speedup * warm, f"cold {cold:.1f} ms vs {warm_label} {warm:.1f} ms at {longest} tokens"
    return {"tokens": longest, "cold_ms": cold, "warm_ms": warm}


def check_counters(run: Run, phase: str, hit_counter: str) -> None:
    """The server's hit-counter delta over the phase equals the cached tokens its requests reported."""
    assert phase in run.deltas, f"no metric deltas for phase {phase}: {list(run.deltas)}"
    delta = run.delta(phase, hit_counter)
    assert delta == run.cached_sum(phase), (
        f"{hit_counter} delta {delta} != sum of cached_tokens {run.cached_sum(phase)}"
    )
