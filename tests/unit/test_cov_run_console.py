"""The console's bookkeeping and lines (kvbench.run.console.progress, .live): in flight never below
zero, the plain progress line and the phase's last one computed from the rows it was given."""

from __future__ import annotations

import re

import pytest

from kvbench.client import RequestRecord
from kvbench.run.console import progress as progress_mod
from kvbench.run.console.live import PhaseStats, panel, plain_line, stats_text
from kvbench.run.console.progress import Progress


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def rec(phase: str, ttft_ms: float | None, prompt: int, cached: int | None, ok: bool = True) -> RequestRecord:
    r = RequestRecord(request_id="r", phase=phase, prompt_tokens=prompt, cached_tokens=cached)
    r.sent_ns = 1_000_000
    r.first_token_ns = None if ttft_ms is None else 1_000_000 + int(ttft_ms * 1e6)
    if not ok:
        r.fail("http_500", "boom")
    return r


def test_in_flight_is_never_negative_whatever_order_requests_end_in() -> None:
    p = Progress(quiet=True)
    p.start_phase("cached", 4)
    p.request_started()
    p.request_done(True)
    for _ in range(3):  # rows from load workers: they never passed request_started here
        p.request_done(False)
    assert (p.in_flight, p.done, p.errors, p.total, p.phase) == (0, 4, 3, 4, "cached")


def test_a_probe_in_flight_is_carried_into_the_next_phase() -> None:
    p = Progress(quiet=True)
    p.request_started()  # a probe, outside any phase
    p.start_phase("cached", 2)
    assert p.in_flight == 1 and p.done == 0
    p.end_phase()
    assert p.total == 0


def test_the_plain_line_is_due_every_few_seconds_and_at_the_phases_end(monkeypatch, capsys) -> None:
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    monkeypatch.setattr("kvbench.run.console.live.time.monotonic", clock)
    p = Progress(quiet=False, plain=True)
    p.start_phase("cached", 3)
    p.sending()
    assert capsys.readouterr().err == "[cached] 3 requests\n"
    for i, (ttft, cached) in enumerate([(10.0, 0), (30.0, 900)]):
        clock.t += 1.0
        p.request_started()
        p.row(rec("cached", ttft, 1000, cached))
        p.request_done(True)
        if i == 0:
            assert capsys.readouterr().err == ""  # 1 s since the phase began: not due yet
    assert capsys.readouterr().err == ""
    clock.t += 0.5
    p.request_done(True)  # 2.5 s in: not due by time, but it is the last of the phase
    line = capsys.readouterr().err.strip()
    elapsed = 2.5
    assert line.startswith(f"[cached] 3/3  {3 / elapsed:.2f} req/s  in flight 0  errors 0")
    assert line.endswith(f"hit 45.0%  elapsed {elapsed:.1f}s")  # 900 of 2000 prompt tokens
    m = re.search(r"TTFT p50 ([\d.]+) ms p99 ([\d.]+) ms", line)
    assert m is not None and 10.0 <= float(m.group(1)) <= 30.0 and float(m.group(2)) <= 30.0


def test_rows_of_another_phase_or_without_counts_do_not_move_the_figures() -> None:
    p = Progress(quiet=True)
    p.start_phase("cached", 5)
    p.row(rec("probe", 5.0, 512, 0))  # a probe's row: not this phase's
    p.row(rec("cached", None, 1000, None))  # no cached count: says nothing of hits
    p.row(rec("cached", 50.0, 1000, 500, ok=False))  # failed: no TTFT, no hit
    s = p.stats
    assert s.rows == 2 and s.hit_ratio() is None and s.ttft_ms() is None


def test_the_figures_text_adds_what_is_known_only() -> None:
    s = PhaseStats(phase="noisy", total=10, done=4, errors=1, in_flight=2, t0=0.0)
    assert stats_text(s, 2.0) == "2.00 req/s  in flight 2  errors 1"

    class Noise:
        def live_bytes(self) -> int:
            return 6_000_000_000

    s.noise, s.tier_gb_s = Noise(), {"onboard G2": 1.5, "offload G3": 0.25}
    assert stats_text(s, 2.0).endswith("noise 3.00 GB/s  offload G3 0.25 GB/s, onboard G2 1.50 GB/s")
    assert plain_line(s, 2.0).startswith("[noisy] 4/10  2.00 req/s")


@pytest.mark.parametrize("noise_bytes", [None, 2_000_000_000])
def test_the_panel_says_noise_is_known_at_the_end_when_it_has_no_live_count(noise_bytes) -> None:
    from rich.console import Console

    class Noise:
        def live_bytes(self) -> int | None:
            return noise_bytes

    s = PhaseStats(phase="noisy", total=4, done=2, t0=0.0, noise=Noise(), tier_gb_s={"onboard G2": 1.0})
    console = Console(record=True, width=100)
    console.print(panel(s, now=1.0))
    text = console.export_text()
    assert ("known when it stops" in text) is (noise_bytes is None)
    assert ("2.00 GB/s" in text) is (noise_bytes is not None) and "onboard G2 1.00 GB/s" in text
