"""`kvbench run replay --arms offload,no-offload` on the embedded mock: the offload arm hits the
trace's ideal (G4), the no-offload arm only what a small G1 holds (more than 0: the trace reuses
short-range), and the verdict table says so from the mock's own tier counters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile
from kvbench.results import read_jsonl

pytestmark = pytest.mark.slow

KVBENCH = [sys.executable, "-c", "from kvbench.cli import main; main()"]
SMALL = Path(__file__).resolve().parents[2] / "tests" / "data" / "replay" / "mooncake-small.jsonl"


def test_arms_offload_vs_no_offload(tmp_path: Path) -> None:
    g1 = 120.5 * derive_params(load_profile("ci")).block_bytes  # far under the trace's ~4,700 blocks
    args = [
        "run",
        "replay",
        "--trace",
        str(SMALL),
        "--mock-profile",
        "ci",
        "-q",
        "--output-dir",
        str(tmp_path),
    ]
    args += ["--set", "test.schedule=concurrent", "--set", "test.concurrency=1"]
    args += [
        "--set",
        f"target.mock_overrides={{tiers.G1.capacity_bytes: {g1}}}",
        "--arms",
        "offload,no-offload",
    ]
    result = subprocess.run([*KVBENCH, *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (folder,) = tmp_path.glob("arms-*")
    arms = [p.name.split("-", 1)[1] for p in sorted(folder.iterdir()) if p.is_dir()]
    assert arms == ["offload", "no-offload", "no-offload", "offload"]  # ABBA
    doc = json.loads((folder / "verdict.json").read_text())
    rows = {r["figure"]: r for r in doc["verdict"]}
    assert "hit ratio" in (folder / "verdict.html").read_text()
    for arm in doc["arms"]:  # every arm from a verified cold start
        manifest = json.loads((Path(arm["run_dir"]) / "manifest.json").read_text())
        assert manifest["cold_start"]["verified"] is True
        replay = read_jsonl(Path(arm["run_dir"]) / "replay.jsonl")
        reqs = {r["request_id"]: r for r in read_jsonl(Path(arm["run_dir"]) / "requests.jsonl")}
        got = sum(reqs[r["request_id"]]["cached_tokens"] for r in replay)
        ideal = sum(r["engine_expected_tokens"] for r in replay)
        if arm["arm"] == "offload":
            assert got == ideal > 0
        else:
            assert 0 < got < ideal
    hit = rows["hit ratio"]
    assert hit["other"] > 0 and hit["change"] < 0 and hit["distinguishable"]
    assert rows["hit share G4"]["offload"] == pytest.approx(hit["offload"])
    assert rows["hit share G4"]["other"] == 0 and rows["hit share G1"]["other"] == pytest.approx(hit["other"])
    assert "| hit ratio | no-offload |" in result.stdout
    for arm in doc["arms"]:  # each arm's own report and summary.json carry the verdict rows
        run_dir = Path(arm["run_dir"])
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["verdict"] == doc["verdict"]
        assert f"the {arm['arm']} arm ({run_dir.name})" in summary["verdict_note"]
        md = (run_dir / "report.md").read_text()
        assert "## Offload verdict" in md
        hit_cells = [c.strip() for c in md.split("| hit ratio | no-offload |")[1].splitlines()[0].split("|")]
        assert float(hit_cells[0]) == pytest.approx(hit["offload"], rel=1e-2)
        assert float(hit_cells[1]) == pytest.approx(hit["other"], rel=1e-2)
        assert "Offload verdict" in (run_dir / "report.html").read_text()
        assert f"arm {arm['arm']} report: {run_dir / 'report.html'}" in result.stdout
    # compare of one offload and one no-offload run: the hit ratio change with its interval, binned lengths
    dirs = [a["run_dir"] for a in doc["arms"][:2]]
    out = tmp_path / "cmp"
    cmp = subprocess.run(
        [*KVBENCH, "compare", *dirs, "--out", str(out), "-q"], capture_output=True, text=True
    )
    assert cmp.returncode == 0, cmp.stderr
    md = (out / "compare.md").read_text()
    (hit_line,) = [ln for ln in md.splitlines() if ln.startswith("| hit ratio |")]
    assert "(no-offload)" in hit_line and "| yes |" in hit_line
    lengths = [ln for ln in md.splitlines() if "TTFT p50 at" in ln]
    assert 0 < len(lengths) <= 8 and all(" tokens (ms)" in ln and "-" in ln for ln in lengths)
    assert not any("| cached" in ln for ln in lengths)  # labelled by the arm


def test_arms_refused_on_a_server_without_baseline_url(tmp_path: Path) -> None:
    args = ["run", "replay", "--trace", str(SMALL), "--base-url", "http://127.0.0.1:9", "--engine", "vllm"]
    args += ["--arms", "offload,no-offload", "--output-dir", str(tmp_path)]
    result = subprocess.run([*KVBENCH, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--baseline-url" in result.stderr and "kv-transfer-config" in result.stderr
    assert not list(tmp_path.iterdir())
