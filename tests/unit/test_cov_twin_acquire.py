"""kvbench.twin.acquire (`kvbench fit --base-url`) with the child `kvbench run` faked: the flags each child
gets, the budget that decides which throughput runs fit, and redacted error lines; plus `fit --twin`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvbench.errors import UsageError
from kvbench.twin import acquire as A

SECRET = "sk-live-0123456789abcdef0123"


def _plan(tmp: Path, **kw: Any) -> A.Plan:
    base: dict[str, Any] = {
        "base_url": "http://127.0.0.1:8000",
        "lengths": (1000, 4000),
        "concurrencies": (1, 4),
        "budget_s": 100.0,
        "runs_dir": tmp / "runs",
    }
    base.update(kw)
    return A.Plan(**base)


class Clock:
    """time.monotonic as the test says: each child run moves it on by what that test kind costs."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fake(
    monkeypatch: pytest.MonkeyPatch, clock: Clock, cost: dict[str, float], fail: dict[str, Any] | None = None
):
    calls: list[tuple[list[str], float]] = []
    fail = fail or {}

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        test = argv[4]
        calls.append((argv, kw["timeout"]))
        clock.now += cost.get(test, 0.0)
        outcome = fail.get(test)
        if outcome == "timeout":
            raise subprocess.TimeoutExpired(argv, kw["timeout"])
        if outcome is not None:
            return subprocess.CompletedProcess(argv, 1, stdout="", stderr=outcome)
        out = Path(argv[argv.index("--output-dir") + 1])
        (out / f"{len(calls):02d}-{test}").mkdir()
        return subprocess.CompletedProcess(argv, 0, stdout="", stderr="")

    monkeypatch.setattr(A.subprocess, "run", run)
    monkeypatch.setattr(A.time, "monotonic", clock)
    return calls


def test_parse_counts_sorts_dedups_and_scales_k() -> None:
    assert A.parse_counts("--concurrencies", "8, 2,2,1") == (1, 2, 8)
    assert A.parse_counts("--lengths", "1k,4K,1_500", scale_k=True) == (1000, 1500, 4000)
    for bad in ("", "0,1", "-2", "two", "1.5"):
        with pytest.raises(UsageError, match=r"^--concurrencies .*: expected positive integers"):
            A.parse_counts("--concurrencies", bad)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"base_url": "localhost:8000"}, "--base-url 'localhost:8000': expected http://HOST[:PORT]"),
        ({"budget_s": 0.0}, "--budget-s 0: must be positive"),
        ({"lengths": (1000,)}, "--lengths: the prefill fit needs at least two"),
        ({"api_key_env": "MY-KEY"}, "--api-key-env 'MY-KEY': the NAME of an environment variable"),
        ({"api_key_env": "KVB_TEST_UNSET_KEY"}, "--api-key-env KVB_TEST_UNSET_KEY: not set"),
    ],
)
def test_check_names_the_flag(monkeypatch, tmp_path: Path, change: dict[str, Any], needle: str) -> None:
    monkeypatch.delenv("KVB_TEST_UNSET_KEY", raising=False)
    with pytest.raises(UsageError) as exc:
        A.check(_plan(tmp_path, **change))
    assert needle in str(exc.value)


def test_a_bad_base_url_is_redacted_in_its_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        A.check(_plan(tmp_path, base_url=f"ftp://user:{SECRET}@host"))
    assert SECRET not in str(exc.value)


def test_acquire_runs_the_sweep_then_each_throughput_that_fits(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVB_TEST_KEY", SECRET)
    clock = Clock()
    calls = _fake(monkeypatch, clock, {"ttft": 13.0, "throughput": 20.0})
    said: list[str] = []
    plan = _plan(tmp_path, lengths=(1000, 2000, 8000), api_key_env="KVB_TEST_KEY", model="m1", max_tokens=8)
    runs = A.acquire(plan, said.append)
    assert [r.name for r in runs] == ["01-ttft", "02-throughput", "03-throughput"]
    sweep, sweep_timeout = calls[0]
    assert sweep_timeout == pytest.approx(100.0)
    assert sweep[sweep.index("--lengths") + 1] == "1000,2000,8000"
    assert sweep[sweep.index("--api-key-env") + 1] == "KVB_TEST_KEY" and SECRET not in " ".join(sweep)
    assert sweep[sweep.index("--model") + 1] == "m1" and sweep[sweep.index("--max-tokens") + 1] == "8"
    assert [sweep[i + 1] for i, a in enumerate(sweep) if a == "--set"] == list(A.TELEMETRY_SETS)
    tp1, t1 = calls[1]
    # the middle length, at least MIN_REQUESTS requests, one prompt per connection
    assert tp1[tp1.index("--lengths") + 1] == "2000"
    assert tp1[tp1.index("--requests") + 1] == str(A.MIN_REQUESTS) and tp1[tp1.index("--prompts") + 1] == "1"
    assert t1 == pytest.approx(100.0 - 13.0)
    tp4, t4 = calls[2]
    assert tp4[tp4.index("--requests") + 1] == "12" and t4 == pytest.approx(100.0 - 33.0)
    assert said[-1] == "fit: measured in 53.0 s; fitting 3 run(s)"


def test_a_throughput_run_that_cannot_fit_the_budget_is_skipped(monkeypatch, tmp_path: Path) -> None:
    clock = Clock()
    # the sweep's 4 requests took (45 - STARTUP_S) s: 10 s each, so 8 requests need ~85 s, 10 are left
    calls = _fake(monkeypatch, clock, {"ttft": 45.0})
    said: list[str] = []
    runs = A.acquire(_plan(tmp_path, budget_s=55.0), said.append)
    assert [r.name for r in runs] == ["01-ttft"] and len(calls) == 1
    assert "fit: skipped 1 connection(s): ~85 s needed, 10 s left" in said
    assert "fit: skipped 4 connection(s): ~125 s needed, 10 s left" in said


def test_a_failed_throughput_run_is_left_out_with_its_key_redacted(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVB_TEST_KEY", SECRET)
    clock = Clock()
    _fake(monkeypatch, clock, {"ttft": 6.0}, {"throughput": f"warming\nHTTP 401 for key {SECRET}"})
    said: list[str] = []
    runs = A.acquire(_plan(tmp_path, concurrencies=(2,), api_key_env="KVB_TEST_KEY"), said.append)
    assert [r.name for r in runs] == ["01-ttft"]
    (line,) = [s for s in said if "left out" in s]
    assert line.startswith("fit: throughput at 2 connection(s) left out (exit 1: HTTP 401 for key ")
    assert SECRET not in "\n".join(said)


def test_a_failed_or_timed_out_sweep_is_one_usage_error(monkeypatch, tmp_path: Path) -> None:
    _fake(monkeypatch, Clock(), {}, {"ttft": "target.base_url: connection refused"})
    with pytest.raises(
        UsageError, match=r"TTFT sweep failed \(exit 1: target.base_url: connection refused\)"
    ):
        A.acquire(_plan(tmp_path), lambda s: None)
    _fake(monkeypatch, Clock(), {}, {"ttft": "timeout"})
    with pytest.raises(UsageError, match=r"TTFT sweep failed \(stopped at the budget \(100 s left\)\)"):
        A.acquire(_plan(tmp_path), lambda s: None)


# --- kvbench fit: the flags around --base-url and --twin -------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["fit", "--twin", "t.yaml"], "--twin: name the runs to predict with --validate RUN"),
        (["fit", "r", "--twin", "t.yaml", "--validate", "v"], "--twin validates an existing twin"),
        (["fit", "r", "--api-key-env", "K"], "--api-key-env: only with --base-url"),
        (["fit", "--base-url", "http://h:1", "--lengths", "1k,x"], "--lengths '1k,x': expected positive"),
        (["fit"], "kvbench fit: name at least one run directory"),
    ],
)
def test_fit_flag_errors_are_one_line_exit_2(run_cli, args: list[str], needle: str) -> None:
    code, _out, err = run_cli(*args)
    assert code == 2 and needle in err


def test_fit_twin_refuses_a_missing_file_or_a_profile_without_fit(run_cli, tmp_path: Path) -> None:
    code, _, err = run_cli("fit", "--twin", str(tmp_path / "nope.yaml"), "--validate", str(tmp_path))
    assert code == 2 and "no such profile file" in err
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: plain\ntiers: {}\n", encoding="utf-8")
    code, _, err = run_cli("fit", "--twin", str(plain), "--validate", str(tmp_path))
    assert code == 2 and "not a twin (no fit: section" in err


def test_fit_twin_writes_the_validation_rows_into_the_profile(monkeypatch, kvbench, tmp_path: Path) -> None:
    import yaml

    from kvbench.twin import validate as V

    twin = tmp_path / "twin.yaml"
    twin.write_text("name: twin\nfit:\n  source: {engine: vllm}\n", encoding="utf-8")
    seen: dict[str, Any] = {}

    def fake(path: Path, runs: list[Path], out: Path, source: dict[str, Any]):
        seen.update(path=path, runs=runs, out=out, source=source)
        return [V.Row("r1", "cached", "req/s", 2.0, 3.0)], ["warning: r1 measured another system"]

    monkeypatch.setattr(V, "validate", fake)
    code, out, _ = kvbench(
        "fit", "--twin", str(twin), "--validate", "r1", "--validate-dir", str(tmp_path / "v")
    )
    assert code == 0
    assert seen == {"path": twin, "runs": [Path("r1")], "out": tmp_path / "v", "source": {"engine": "vllm"}}
    assert "warning: r1 measured another system" in out and "+50.0%" in out
    saved = yaml.safe_load(twin.read_text(encoding="utf-8"))
    assert saved["fit"]["validation"] == [V.Row("r1", "cached", "req/s", 2.0, 3.0).as_dict()]
