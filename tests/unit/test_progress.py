"""The progress lines of a run: a phase's req/s counts from when its requests start, not from before
its noise clients or load workers came up (seconds on a Ray cluster)."""

from __future__ import annotations

from kvbench.run.console import progress as progress_mod
from kvbench.run.console.progress import Progress


def test_a_phases_rate_counts_from_when_its_requests_start(monkeypatch, capsys) -> None:
    now = [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    p = Progress(plain=True)
    p.start_phase("noisy-1", 2)
    now[0] += 3.0  # the noise clients start
    p.sending()
    now[0] += 0.5
    p.request_started()
    p.request_done(True)
    now[0] += 0.5
    p.request_started()
    p.request_done(False)
    p.end_phase()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[noisy-1] 2 requests"
    assert lines[-1] == "[noisy-1] 2/2  2.00 req/s  in flight 0  errors 1  elapsed 1.0s"
