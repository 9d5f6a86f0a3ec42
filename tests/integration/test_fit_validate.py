"""`kvbench fit --validate` on the embedded mock: the error table is produced, written to the twin,
a twin reproduces its own data, and a run on the twin warns where it leaves the fitted range."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow]

PACE = ["--set", "target.mock_profile=ci", "--set", "target.mock_overrides.time_scale=0.1"]


def _kvbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kvbench", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _run(tmp: Path, out: str, *args: str) -> Path:
    _kvbench("run", *args, "--output-dir", str(tmp / out), "--quiet", "--no-report", cwd=tmp)
    (run_dir,) = (tmp / out).iterdir()
    return run_dir


@pytest.fixture(scope="module")
def system(tmp_path_factory) -> tuple[Path, Path]:
    """(a ttft run of the mock at pace 0.1, a twin fitted to it and validated on it)."""
    tmp = tmp_path_factory.mktemp("validate")
    ttft = _run(tmp, "ttft", "ttft", "--set", "prompts.lengths=[2000,8000,16000]", *PACE)
    proc = _kvbench("fit", str(ttft), "-o", "twin.yaml", "--validate", str(ttft), cwd=tmp)
    assert "metric" in proc.stdout and "error" in proc.stdout
    return ttft, tmp / "twin.yaml"


def test_the_error_table_is_produced_and_kept_in_the_twin(system) -> None:
    ttft, twin = system
    rows = yaml.safe_load(twin.read_text())["fit"]["validation"]
    by = {(r["label"], r["metric"]): r for r in rows}
    assert {("cold", "TTFT p50 ms"), ("warm", "TTFT p50 ms"), ("warm", "hit ratio")} <= set(by)
    assert all(r["run"] == str(ttft) and not r["other_system"] for r in rows)
    # the hits are the cache's arithmetic, not a timing: the twin reproduces them exactly
    assert by[("warm", "hit ratio")]["error_pct"] == pytest.approx(0.0, abs=0.01)
    assert by[("cold", "hit ratio")]["measured"] == 0
    # a fit reproduces its own data (wide: single requests on a shared 2-core machine)
    for label in ("cold", "warm"):
        assert abs(by[(label, "TTFT p50 ms")]["error_pct"]) < 60, by[(label, "TTFT p50 ms")]


def test_a_run_on_the_twin_warns_outside_its_range(system, tmp_path: Path) -> None:
    _, twin = system
    load = ["--set", "prompts.count=4", "--set", "prompts.lengths=[4000]", "--set", "load.requests=8"]
    pred = _run(tmp_path, "pred", "throughput", "--mock-profile", str(twin), "--set",
                "target.mock_overrides={}", "--concurrency", "3", *load)  # fmt: skip
    report = _kvbench("report", str(pred), cwd=tmp_path)
    assert "twin range: 8 request(s) at connections 3, outside the fitted 1-1" in report.stdout
    summary = json.loads((pred / "summary.json").read_text())
    assert summary["twin"]["outside"][0]["what"] == "connections"
    assert summary["twin"]["expected_error"]["TTFT p50 ms"] >= 0
    assert "Twin prediction and its range" in (pred / "report.md").read_text()


def test_a_run_of_another_pace_is_called_another_system(system, tmp_path: Path) -> None:
    _, twin = system
    pace = ["--set", "target.mock_profile=ci", "--set", "target.mock_overrides.time_scale=0.05"]
    other = _run(tmp_path, "other", "ttft", "--set", "prompts.lengths=[2000]", *pace)
    copy = tmp_path / "twin.yaml"
    copy.write_text(twin.read_text())
    proc = _kvbench("fit", "--twin", str(copy), "--validate", str(other), cwd=tmp_path)
    assert "the mock ran at pace 0.05, the twin was fitted at pace 0.1" in proc.stdout
    rows = yaml.safe_load(copy.read_text())["fit"]["validation"]
    assert rows and all(r["other_system"] for r in rows)


def test_validate_refuses_what_is_not_a_twin(tmp_path: Path) -> None:
    (tmp_path / "plain.yaml").write_text("name: x\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kvbench", "fit", "--twin", "plain.yaml", "--validate", "nowhere"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "not a twin" in proc.stderr and "Traceback" not in proc.stderr
