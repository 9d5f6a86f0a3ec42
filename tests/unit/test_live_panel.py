"""The live view: the panel on a terminal, plain lines without one, and --serve-metrics' values.

The figures are checked against what the rows fed in say (TTFT quantiles, hit ratio, counts)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvbench.client import RequestRecord
from kvbench.run.console import progress as progress_mod
from kvbench.run.console.live import RESERVOIR, PhaseStats, Reservoir, panel
from kvbench.run.console.progress import Progress
from kvbench.telemetry.serve_metrics import RunMetrics


def rec(phase: str, ttft_ms: float | None, prompt: int = 1000, cached: int | None = 0, status: str = "ok"):
    r = RequestRecord(request_id=f"x-{phase}", phase=phase, prompt_tokens=prompt, cached_tokens=cached)
    r.sent_ns = 1_000_000_000
    r.first_token_ns = None if ttft_ms is None else r.sent_ns + int(ttft_ms * 1e6)
    if status != "ok":
        r.fail("http_500", "boom")
    return r


def test_the_reservoir_stays_bounded_and_its_quantiles_follow_the_stream() -> None:
    rng = np.random.default_rng(7)
    stream = rng.exponential(0.05, size=5 * RESERVOIR)
    res = Reservoir()
    for x in stream:
        res.add(float(x))
    assert res.seen == len(stream) and len(res.values) == RESERVOIR
    p50, p99 = res.quantiles((0.5, 0.99))
    true50, true99 = np.quantile(stream, (0.5, 0.99))
    assert p50 == pytest.approx(true50, rel=0.05)
    assert p99 == pytest.approx(true99, rel=0.10)
    assert Reservoir().quantiles((0.5,)) is None


def test_without_a_terminal_the_view_is_plain_lines_with_ttft_and_hits(monkeypatch, capsys) -> None:
    now = [50.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    p = Progress()  # pytest's stderr is no terminal: plain lines, no live panel
    assert p.plain
    p.start_phase("cached", 4)
    p.sending()
    ttfts = [10.0, 20.0, 30.0, None]
    for i, t in enumerate(ttfts):
        now[0] += 0.5
        p.request_started()
        r = rec("cached", t, prompt=1000, cached=250 * i, status="ok" if t is not None else "error")
        p.row(r)  # rows before the phase's last request ends: the final line has them all
        p.request_done(r.ok)
    assert p._live is None
    p.end_phase()
    lines = capsys.readouterr().err.splitlines()
    p50, p99 = np.quantile([10.0, 20.0, 30.0], (0.5, 0.99))
    # hit ratio over the ok rows: (0 + 250 + 500) / 3000
    assert lines == [
        "[cached] 4 requests",
        f"[cached] 4/4  2.00 req/s  in flight 0  errors 1  TTFT p50 {p50:.1f} ms p99 {p99:.1f} ms  hit 25.0%"
        "  elapsed 2.0s",
    ]


def test_quiet_prints_nothing_but_still_counts(capsys) -> None:
    p = Progress(quiet=True, plain=False)
    p.start_phase("fill", 1)
    p.request_started()
    p.row(rec("fill", 12.0))
    p.request_done(True)
    p.end_phase()
    assert capsys.readouterr().err == ""
    assert p._live is None and p.stats.rows == 1


def test_the_panel_shows_the_phase_so_far() -> None:
    from rich.console import Console

    s = PhaseStats(phase="noisy-2", total=10, t0=0.0)
    for t in (40.0, 60.0):
        s.done += 1
        s.add_row(True, t / 1e3, 1000, 500)
    s.done += 1
    s.errors += 1
    s.add_row(False, None, 1000, None)
    out = io.StringIO()
    Console(file=out, width=100, force_terminal=False).print(panel(s, now=2.0))
    text = out.getvalue()
    p50, p99 = np.quantile([40.0, 60.0], (0.5, 0.99))
    assert "noisy-2" in text and "3/10" in text and "1.50 req/s" in text
    assert f"{p50:.1f} / {p99:.1f} ms" in text
    assert "50.0% of prompt tokens cached" in text
    assert "errors" in text and " 1 " in text


def test_the_served_metrics_count_rows_by_phase_and_status() -> None:
    m = RunMetrics()
    p = Progress(quiet=True, metrics=m)
    p.start_phase("cached", 3)
    rows = [
        rec("cached", 20.0, cached=400),
        rec("cached", 80.0, cached=None),
        rec("cached", None, status="error"),
    ]
    for r in rows:
        p.request_started()
        p.request_done(r.ok)
        p.row(r)
    p.request_started()  # one still out
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(generate_latest(m.registry).decode())
        for s in fam.samples
    }
    assert got[("kvbench_requests_total", (("phase", "cached"), ("status", "ok")))] == 2
    assert got[("kvbench_requests_total", (("phase", "cached"), ("status", "error")))] == 1
    assert got[("kvbench_ttft_seconds_count", (("phase", "cached"),))] == 2
    assert got[("kvbench_ttft_seconds_sum", (("phase", "cached"),))] == pytest.approx(0.1)
    assert got[("kvbench_ttft_seconds_bucket", (("le", "0.025"), ("phase", "cached")))] == 1
    # only the row that reported a cached count counts towards the hit ratio
    assert got[("kvbench_cached_tokens_total", (("phase", "cached"),))] == 400
    assert got[("kvbench_prompt_tokens_total", (("phase", "cached"),))] == 1000
    assert got[("kvbench_requests_in_flight", ())] == 1
    assert got[("kvbench_phase_requests", (("phase", "cached"),))] == 3
    assert got[("kvbench_phase_info", (("phase", "cached"),))] == 1


def test_on_a_terminal_the_panel_runs_per_phase_and_ends_with_its_totals(capsys) -> None:
    p = Progress(plain=False)
    p.start_phase("cached", 2)
    assert p._live is not None
    p.sending()
    for t in (30.0, 50.0):
        p.request_started()
        p.row(rec("cached", t, cached=500))
        p.request_done(True)
    p.log("a line while the panel is up")
    p.end_phase()
    assert p._live is None
    err = capsys.readouterr().err  # no terminal under pytest: rich prints the last frame once
    assert "a line while the panel is up" in err
    assert "2/2" in err and "50.0% of prompt tokens cached" in err


def test_noise_gb_s_and_bytes_come_from_the_phases_handle(monkeypatch, capsys) -> None:
    from kvbench.noise.handle import NoiseHandle

    now = [10.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    sent = [0]
    handle = NoiseHandle(kind="tcp", config={}, phase="noisy-1", origin_ns=0, started_ns=1)
    handle.live_bytes = lambda: sent[0]
    m = RunMetrics()
    p = Progress(plain=True, metrics=m)
    p.start_phase("noisy-1", 1)
    p.sending(handle)
    now[0] += 2.0
    sent[0] = 3_000_000_000  # 3 GB in 2 s
    p.request_started()
    p.request_done(True)
    assert capsys.readouterr().err.splitlines()[-1].endswith("noise 1.50 GB/s  elapsed 2.0s")

    def noise_bytes() -> float | None:
        return m.registry.get_sample_value("kvbench_noise_bytes_total", {"phase": "noisy-1"})

    assert noise_bytes() == 3e9  # while running: what it has sent so far
    handle.stopped_ns, handle.total_bytes = 2, 3_200_000_000
    assert noise_bytes() == 3.2e9  # stopped: its final total


def test_tier_gb_s_comes_from_the_engines_byte_counters_between_two_scrapes(monkeypatch, capsys) -> None:
    from kvbench.engines.adapters import get_adapter

    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    p = Progress(plain=True)
    p.tiers.counters = get_adapter("mock").transfer_counters  # kvbench_mock_onboard_bytes_total{tier}
    p.start_phase("cached", 1)

    def scrape(g2: float, g4: float) -> dict:
        name = "kvbench_mock_onboard_bytes_total"
        return {(name, (("tier", "G2"),)): g2, (name, (("tier", "G4"),)): g4, ("other_total", ()): 9e9}

    p.scraped(scrape(1e9, 0.0))
    assert p.stats.tier_gb_s == {}  # one scrape: no rate yet
    now[0] += 0.5
    p.scraped(scrape(2e9, 0.25e9))
    assert p.stats.tier_gb_s == pytest.approx({"onboard G2": 2.0, "onboard G4": 0.5})
    p.request_started()
    p.request_done(True)
    assert "onboard G2 2.00 GB/s, onboard G4 0.50 GB/s" in capsys.readouterr().err
