"""The report's "SLO attainment and goodput" section, for a run whose scenario has an `slo:`.

Per phase and label (probes, cache fills and TTFT fillers are not measurements): the share of
requests meeting every bound with its 95% Wilson interval, goodput over the phase's own time, and
each bounded percentile against its bound. Reads the run directory only (the saved scenario.yaml,
requests.jsonl, the manifest's phase durations), so `kvbench report` on an old run says the same.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kvbench.report.core.formats import Section, Table, fmt
from kvbench.report.core.goodput import point_metrics
from kvbench.results import REQUESTS, SCENARIO, load_record, read_jsonl
from kvbench.scenario.slo import Slo

NOT_MEASURED = frozenset({"probe", "fill", "filler"})
HEAD = ["phase", "label", "requests", "good", "attainment [95% CI]", "goodput req/s [95% CI]"]


def saved_slo(run_dir: Path) -> dict[str, float]:
    """The saved scenario's SLO bounds ({} when it has none or the file does not read)."""
    from kvbench.configfile import read_yaml
    from kvbench.errors import KvbenchError

    path = run_dir / SCENARIO
    try:
        raw = read_yaml(path).get("slo") if path.exists() else None
        return Slo.model_validate(raw).bounds() if isinstance(raw, dict) else {}
    except (KvbenchError, ValidationError, AttributeError):
        return {}


def slo_rows(run_dir: Path, slo: dict[str, float]) -> list[dict[str, Any]]:
    """One PointMetrics dict per (phase, label) of measured rows, in the order they ran."""
    manifest = load_record(run_dir).manifest
    durations = {p.name: p.duration_s for p in manifest.phases}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in read_jsonl(run_dir / REQUESTS):
        if r.get("phase") != "probe" and r.get("label") not in NOT_MEASURED:
            groups[(str(r.get("phase")), str(r.get("label")))].append(r)
    return [
        {"phase": phase, "label": label, **point_metrics(rows, durations.get(phase), slo).to_dict()}
        for (phase, label), rows in groups.items()
    ]


def _ci(value: float | None, ci: Any, pct: bool) -> str:
    if value is None:
        return "n/a"
    if pct:
        return f"{value:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]"
    return f"{fmt(value)} [{fmt(ci[0])}, {fmt(ci[1])}]" if ci[0] is not None else fmt(value)


def slo_section(run_dir: Path) -> Section | None:
    """The section, or None when the scenario has no SLO."""
    slo = saved_slo(Path(run_dir))
    if not slo:
        return None
    rows = slo_rows(Path(run_dir), slo)
    head = [*HEAD, *(f"{k} (<= {v:g})" for k, v in slo.items())]
    table = []
    for m in rows:
        cells = [m["phase"], m["label"], fmt(m["requests"]), fmt(m["good"])]
        cells += [
            _ci(m["attainment"], m["attainment_ci"], True),
            _ci(m["goodput_rps"], m["goodput_ci"], False),
        ]
        for name in slo:
            met = m["percentiles_met"].get(name)
            cells.append(f"{fmt(m.get(name))} ({'met' if met else 'missed'})")
        table.append(cells)
    bounds = ", ".join(f"{k} <= {v:g} ms" for k, v in slo.items())
    para = (
        f"The scenario's SLO: {bounds}. A request is good when it succeeded and every bounded metric "
        "is within the bound (a p50 bound is judged on the percentile only); goodput is good requests "
        "per second of the phase's time."
    )
    return Section("SLO attainment and goodput", [para], [Table(head, table)])


def slo_console_lines(section: Section) -> list[str]:
    """The section's rows as terminal lines: `SLO phase/label: good/n good, attainment, goodput`."""
    return [
        f"SLO {r[0]}/{r[1]}: {r[3]}/{r[2]} good, attainment {r[4]}, goodput {r[5]} req/s"
        for r in section.tables[0].rows
    ]
