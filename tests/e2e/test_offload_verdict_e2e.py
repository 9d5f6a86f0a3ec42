"""The offload verdict on llama.cpp's CPU build: `kvbench run replay --arms offload,no-offload`
with offload on (one slot, the RAM prompt cache --cache-ram 1024 MiB) against the same engine with
offload off (one slot, --cache-ram 0: only the slot's own KV, the G1, reuses), given as
`--baseline-url`. The verdict comes from the engine's own counts (cached_tokens per request)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import say

from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def offload_on(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("llamacpp", slots=1, ctx=10240, cache_ram_mib=1024, progress=say) as eng:
        yield eng


@pytest.fixture(scope="module")
def offload_off(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("llamacpp", slots=1, ctx=10240, cache_ram_mib=0, progress=say) as eng:
        yield eng


def test_offload_on_hits_more_than_off(
    offload_on: EngineProcess, offload_off: EngineProcess, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "kvbench", "run", "replay-llamacpp", "--base-url", offload_on.base_url,
           "--arms", "offload,no-offload", "--baseline-url", offload_off.base_url,
           "--output-dir", str(tmp_path), "--quiet"]  # fmt: skip
    say("$ kvbench " + " ".join(cmd[3:]))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines()[-14:]:
        say("  " + line)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    (folder,) = tmp_path.glob("arms-*")
    doc = json.loads((folder / "verdict.json").read_text())
    assert [a["arm"] for a in doc["arms"]] == ["offload", "no-offload", "no-offload", "offload"]
    for arm in doc["arms"]:  # each arm from a verified cold start, on its own server
        manifest = json.loads((Path(arm["run_dir"]) / "manifest.json").read_text())
        assert manifest["cold_start"]["verified"] is True
        want = offload_on.base_url if arm["arm"] == "offload" else offload_off.base_url
        assert manifest["target"]["base_url"].rstrip("/") == want.rstrip("/")
    rows = {r["figure"]: r for r in doc["verdict"]}
    hit = rows["hit ratio"]
    # the RAM prompt cache brings back prefixes the one slot has already dropped
    assert hit["offload"] > hit["other"] >= 0 and hit["ci"] is not None
    assert {"TTFT p50 (ms)", "TTFT p99 (ms)", "goodput at SLO"} <= set(rows)
    assert "| hit ratio | no-offload |" in proc.stdout
