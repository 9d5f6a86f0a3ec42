"""`kvbench run throughput --noisy` against a real llama-server with fio storage noise.

What a real engine gives the attribution: llama.cpp's own time counters (prompt and predicted
seconds), so prefill and decode are split from the engine's view; it times no onboarding, so the
share of time on the storage the noise competes for is reported as unknown (not as zero), and the
noise achieved is what fio reports. Skips when llama.cpp is not installed (it never installs one).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from engine_e2e import kvbench_run, say

from kvbench.engines.install import installed
from kvbench.engines.serve import running_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_noisy_throughput_with_fio_storage_noise(tmp_path: Path) -> None:
    if installed("llamacpp") is None:
        pytest.skip("llama.cpp is not installed (kvbench engines install llamacpp)")
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed (.ci/run installs it; Debian: apt-get install fio)")
    from kvbench.report.noisy.section import console_lines
    from kvbench.report.summary import build_summary

    out = tmp_path / "results"
    out.mkdir()
    fio_dir = tmp_path / "fio"
    fio_dir.mkdir()
    noise = f'{{"kind": "fio", "path": "{fio_dir}", "size": "64M", "jobs": 2, "rw": "randread"}}'
    with running_engine(
        "llamacpp", install_missing=False, slots=4, ctx=4096, cache_ram_mib=1024, progress=say
    ) as eng:
        run_dir = kvbench_run(
            "throughput-llamacpp", eng.base_url, out, "--noisy", "--pairs", "2", "--set", f"noise={noise}"
        )
    summary, _, _ = build_summary(run_dir)
    for line in console_lines(summary):
        say(line)
    measured = [a for a in summary.attribution if a.label in ("quiet", "noisy")]
    assert len(measured) == 4
    for a in measured:
        assert a.source == "engine counters (llamacpp)", a.source
        assert a.components_s["prefill"] > 0 and a.components_s["decode"] > 0
    e = summary.noise_effect
    assert e is not None and e.pairs == 2 and e.time_change_ci_pct is not None
    x = summary.noise_explained
    assert x is not None and x.resource == "storage" and x.quiet_share is None
    assert x.noise_bytes_per_s and x.noise_bytes_per_s > 0
