"""The report's mock-lateness check: per phase, the mock's lateness against the modelled TTFT."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kvbench.report.mock_lateness import LATE_SHARE, mock_lateness_section, phase_lateness
from kvbench.results.schema import Label


def _truth(rid: str, ttft_ms: float, late_ms: float, cpu_ms: float = 1.0) -> dict[str, Any]:
    return {
        "request_id": rid,
        "received_ns": 1_000_000,
        "first_token_ns": 1_000_000 + int(ttft_ms * 1e6),
        "mock_late_ms": late_ms,
        "mock_cpu_ms": cpu_ms,
    }


def test_share_is_lateness_over_the_modelled_ttft_per_phase() -> None:
    reqs = [{"request_id": f"q{i}", "phase": "quiet"} for i in range(4)]
    reqs += [{"request_id": f"n{i}", "phase": "noisy"} for i in range(4)]
    truth = [_truth(f"q{i}", 101.0, 1.0) for i in range(4)] + [_truth(f"n{i}", 60.0, 20.0) for i in range(4)]
    quiet, noisy = phase_lateness(reqs, truth)
    assert (quiet.phase, quiet.requests, noisy.phase) == ("quiet", 4, "noisy")
    assert abs(quiet.modelled_ttft_ms_mean - 100.0) < 1e-6 and abs(quiet.share - 0.01) < 1e-9
    assert abs(noisy.share - 0.5) < 1e-9  # 20 ms late on 40 ms of model
    assert not quiet.exceeded and noisy.exceeded and noisy.share > LATE_SHARE


def test_rows_without_ground_truth_or_without_lateness_are_left_out() -> None:
    reqs = [{"request_id": "a", "phase": "p"}, {"request_id": "b", "phase": "p"}]
    old = {k: v for k, v in _truth("b", 10.0, 5.0).items() if k != "mock_late_ms"}  # an older mock
    (p,) = phase_lateness(reqs, [_truth("a", 10.0, 0.0), old])
    assert p.requests == 1
    assert phase_lateness(reqs, [old]) == []


def _run_dir(tmp: Path, late_ms: float) -> SimpleNamespace:
    (tmp / "requests.jsonl").write_text(
        "".join(json.dumps({"request_id": f"r{i}", "phase": "filled"}) + "\n" for i in range(3))
    )
    (tmp / "mock_ground_truth.jsonl").write_text(
        "".join(json.dumps(_truth(f"r{i}", 50.0, late_ms)) + "\n" for i in range(3))
    )
    return SimpleNamespace(run=SimpleNamespace(run_dir=str(tmp)))


def test_section_warns_only_above_the_share(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    late = mock_lateness_section(_run_dir(tmp_path / "a", 25.0))  # type: ignore[arg-type]
    fine = mock_lateness_section(_run_dir(tmp_path / "b", 0.5))  # type: ignore[arg-type]
    assert late is not None and fine is not None
    assert any("WARNING" in p and "filled" in p for p in late.paragraphs)
    assert not any("WARNING" in p for p in fine.paragraphs)


def test_no_section_without_the_mock(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_text(json.dumps({"request_id": "r", "phase": "p"}) + "\n")
    assert mock_lateness_section(SimpleNamespace(run=SimpleNamespace(run_dir=str(tmp_path)))) is None  # type: ignore[arg-type]


def test_probe_phases_do_not_warn(tmp_path: Path) -> None:
    """The cold-start probes are shown but do not warn; any other phase does."""
    summary = _run_dir(tmp_path, 25.0)
    summary.phases = [SimpleNamespace(phase="filled", label=Label.PROBE)]
    section = mock_lateness_section(summary)  # type: ignore[arg-type]
    assert section is not None and not any("WARNING" in p for p in section.paragraphs)
    summary.phases = [SimpleNamespace(phase="filled", label=Label.CACHED)]
    section = mock_lateness_section(summary)  # type: ignore[arg-type]
    assert section is not None and any("WARNING" in p for p in section.paragraphs)
