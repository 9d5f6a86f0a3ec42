"""The report's SLO section on a saved run: the scenario's bounds read back, per phase and label
the good requests counted by hand, goodput over the phase's own time, and what makes no section."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbench.report.core.goodput import wilson
from kvbench.report.slo_section import saved_slo, slo_console_lines, slo_rows, slo_section

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "fixture_runs" / "20261130T141500Z-throughput-7b2e90"
DURATIONS = {"baseline": 61.265361493, "cached": 36.346359261}  # the fixture manifest's phases


def _run(tmp_path: Path, slo: str | None) -> Path:
    run = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, run)
    if slo is not None:
        with (run / "scenario.yaml").open("a") as fh:
            fh.write(f"\nslo: {slo}\n")
    rows = []
    # cached: 10 requests, TTFT 100..1000 ms; one failed
    for i in range(10):
        rows.append({"phase": "cached", "label": "cached", "status": "error" if i == 9 else "ok",
                     "ttft_ms": 100.0 * (i + 1), "e2e_ms": 2000.0})  # fmt: skip
    # baseline: 4 requests at 5 s TTFT; probes and fills are not measurements
    rows += [
        {"phase": "baseline", "label": "baseline", "status": "ok", "ttft_ms": 5000.0, "e2e_ms": 6000.0}
    ] * 4
    rows += [{"phase": "probe", "label": "probe", "status": "ok", "ttft_ms": 1.0}]
    rows += [{"phase": "cached", "label": "fill", "status": "ok", "ttft_ms": 1.0}]
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_bounds_are_read_from_the_saved_scenario(tmp_path: Path) -> None:
    assert saved_slo(_run(tmp_path / "a", "{ttft_p99_ms: 450, e2e_p99_ms: 3000}")) == {
        "ttft_p99_ms": 450.0,
        "e2e_p99_ms": 3000.0,
    }
    assert saved_slo(_run(tmp_path / "b", None)) == {}
    assert saved_slo(_run(tmp_path / "c", "{ttft_p99_ms: -1}")) == {}  # invalid: no section, no crash
    assert saved_slo(tmp_path / "nowhere") == {}


def test_good_requests_and_goodput_by_phase(tmp_path: Path) -> None:
    run = _run(tmp_path, "{ttft_p99_ms: 450}")
    rows = {(r["phase"], r["label"]): r for r in slo_rows(run, saved_slo(run))}
    assert set(rows) == {("cached", "cached"), ("baseline", "baseline")}  # probes and fills left out
    cached = rows[("cached", "cached")]
    # TTFT 100, 200, 300, 400 ms meet 450 ms; the failed one never counts
    assert cached["requests"] == 10 and cached["ok"] == 9 and cached["good"] == 4
    assert cached["attainment"] == pytest.approx(0.4)
    assert cached["attainment_ci"] == pytest.approx(wilson(4, 10))
    assert cached["goodput_rps"] == pytest.approx(4 / DURATIONS["cached"])
    lo, hi = cached["goodput_ci"]
    assert lo <= cached["goodput_rps"] <= hi
    assert cached["percentiles_met"] == {"ttft_p99_ms": False}
    baseline = rows[("baseline", "baseline")]
    assert baseline["good"] == 0 and baseline["attainment_ci"][0] == 0.0


def test_the_section_has_a_row_per_phase_and_label_and_a_column_per_bound(tmp_path: Path) -> None:
    run = _run(tmp_path, "{ttft_p50_ms: 600, e2e_p99_ms: 2500}")
    section = slo_section(run)
    assert section is not None and section.title == "SLO attainment and goodput"
    table = section.tables[0]
    assert table.headers[-2:] == ["ttft_p50_ms (<= 600)", "e2e_p99_ms (<= 2500)"]
    by_phase = {r[0]: r for r in table.rows}
    # cached: TTFT p50 of the 9 ok rows is 500 ms (met); e2e 2000 ms everywhere (met)
    assert by_phase["cached"][-2].endswith("(met)") and by_phase["cached"][-1].endswith("(met)")
    assert by_phase["cached"][3] == "6"  # 100..600 ms meet 600 ms (a bound is inclusive)
    assert by_phase["baseline"][-2].endswith("(missed)")
    assert "ttft_p50_ms <= 600 ms" in section.paragraphs[0]
    lines = slo_console_lines(section)
    assert len(lines) == 2 and lines[0].startswith("SLO ") and "6/10 good" in " ".join(lines)


def test_no_slo_no_section(tmp_path: Path) -> None:
    assert slo_section(_run(tmp_path, None)) is None
