"""What an audit produces: figure values, claim results, readings and the Ledger.

Plain dataclasses with `to_dict()` for `--json`; the text rendering is `text.py`.
A `FigureValue.basis` says what a value rests on: "published" (printed figures only),
"model" (the KV geometry), or "implied" (a figure solved from a stated claim, never
printed). A claim resting on an implied figure is UNVERIFIABLE, never consistent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kvbench.audit.quantities import Interval


@dataclass
class FigureValue:
    id: str
    kind: str  # published | derived | model | implied | unpublished
    interval: Interval | None
    unit: str
    decimals: int | None
    description: str
    expr: str | None = None
    source: str | None = None
    tags: set[str] = field(default_factory=set)
    implied_by: str | None = None
    label: str = ""
    basis: str = "published"  # published | model | implied | unknown (what the value rests on)
    invalid: str | None = None  # why the figure cannot be used (its unit, its expression ...)

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {
            "id": self.id,
            "kind": self.kind,
            "value": None if iv is None else iv.mid,
            "range": None if iv is None or iv.lo == iv.hi else [iv.lo, iv.hi],
            "unit": self.unit,
            "decimals": self.decimals,
            "expr": self.expr,
            "source": self.source,
            "implied_by": self.implied_by,
            "basis": self.basis,
            "label": self.label,
            "description": self.description,
            "invalid": self.invalid,
        }


@dataclass
class Reading:
    """One way of computing a number that matches a stated value."""

    text: str  # in the figures' own words
    value: float
    unit: str
    match: str  # "exact" | "within input rounding"
    figures: tuple[str, ...]
    related: bool
    depth: int
    brief: str = ""  # numbers only, for the verdict table
    slip: str = ""  # the slip kind (kvbench.audit.readings.slips), "" for a reading through other figures

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ClaimResult:
    id: str
    description: str
    expr: str
    stated: float
    unit: str
    decimals: int | None
    stated_range: tuple[float, float]
    recomputed: Interval | None
    verdict: str  # consistent | discrepancy | unverifiable | invalid
    notes: list[str] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    unrelated_matches: int = 0
    assumptions: list[str] = field(default_factory=list)
    stated_text: str = ""
    headline: str = ""
    basis: str = "published"  # published | model | implied | unknown: what the recomputation rests on
    implied_needed: dict[str, float] = field(default_factory=dict)
    fix: str | None = None  # invalid: the suggested fix (a unit such as ms/request)

    def to_dict(self) -> dict[str, Any]:
        rc = self.recomputed
        return {
            "id": self.id,
            "description": self.description,
            "expr": self.expr,
            "stated": self.stated,
            "unit": self.unit,
            "decimals": self.decimals,
            "stated_range": list(self.stated_range),
            "recomputed": None if rc is None else rc.mid,
            "recomputed_range": None if rc is None else [rc.lo, rc.hi],
            "verdict": self.verdict,
            "notes": self.notes,
            "alternative_readings": [r.to_dict() for r in self.readings],
            "unrelated_matches": self.unrelated_matches,
            "assumptions": self.assumptions,
            "stated_text": self.stated_text,
            "basis": self.basis,
            "headline": self.headline,
            "implied_needed": self.implied_needed,
            "fix": self.fix,
        }


@dataclass
class Ledger:
    name: str
    title: str
    figures: list[FigureValue]
    claims: list[ClaimResult]
    sizing: list[dict[str, Any]]
    bounds: list[dict[str, Any]]
    assumptions: list[str]

    @property
    def discrepancies(self) -> list[ClaimResult]:
        return [c for c in self.claims if c.verdict == "discrepancy"]

    @property
    def findings(self) -> list[dict[str, Any]]:
        """Sizing checks and bounds whose conclusion contradicts the publication."""
        return [x for x in self.sizing + self.bounds if x.get("status") == "finding"]

    @property
    def invalid(self) -> list[str]:
        """Ids of the claims, sizing checks and bounds that could not be judged."""
        out = [f.id for f in self.figures if f.invalid is not None]
        out += [c.id for c in self.claims if c.verdict == "invalid"]
        return out + [x["id"] for x in self.sizing + self.bounds if x.get("status") == "invalid"]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            v: sum(1 for c in self.claims if c.verdict == v)
            for v in ("consistent", "discrepancy", "unverifiable", "invalid")
        }
        out["bound_findings"] = sum(1 for b in self.bounds if b.get("status") == "finding")
        out["bounds_invalid"] = sum(1 for b in self.bounds if b.get("status") == "invalid")
        out["bounds_ok"] = len(self.bounds) - out["bound_findings"] - out["bounds_invalid"]
        out["sizing_findings"] = sum(1 for s in self.sizing if s.get("status") == "finding")
        out["sizing_invalid"] = sum(1 for s in self.sizing if s.get("status") == "invalid")
        out["figures_invalid"] = sum(1 for f in self.figures if f.invalid is not None)
        return out

    def verdicts(self) -> list[dict[str, str]]:
        """One row per claim, sizing check and bound: what the verdict table prints."""
        rows = [
            {"what": "figure", "id": f.id, "verdict": "invalid", "conclusion": f.invalid}
            for f in self.figures
            if f.invalid is not None
        ]
        rows += [
            {"what": "claim", "id": c.id, "verdict": c.verdict, "conclusion": c.headline} for c in self.claims
        ]
        rows += [
            {"what": "sizing", "id": s["id"], "verdict": s["status"], "conclusion": s["headline"]}
            for s in self.sizing
        ]
        rows += [
            {"what": "bound", "id": b["id"], "verdict": b["status"], "conclusion": b["headline"]}
            for b in self.bounds
        ]
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "summary": self.summary(),
            "verdicts": self.verdicts(),
            "figures": [f.to_dict() for f in self.figures],
            "claims": [c.to_dict() for c in self.claims],
            "sizing": self.sizing,
            "bounds": self.bounds,
            "assumptions": self.assumptions,
        }


def conclusion(findings: list[str], ok: str, asides: list[str] | None = None) -> dict[str, str]:
    """`status`, `headline` and `verdict` of a sizing check from ONE list of findings, so the verdict
    table, the details and the JSON cannot disagree; `asides` are said without being findings."""
    status = "finding" if findings else "ok"
    text = "; ".join(findings) if findings else ok
    if asides:
        text += " (" + "; ".join(asides) + ")"
    return {"status": status, "headline": text, "verdict": text}


def invalid_check(cid: str, kind: str, description: str, message: str) -> dict[str, Any]:
    """A sizing check or bound that could not be computed: the same keys the text and JSON read."""
    return {
        "id": cid,
        "kind": kind,
        "description": description,
        "status": "invalid",
        "verdict": message,
        "headline": message,
    }


GENERAL_ASSUMPTIONS = [
    "A printed figure stands for every value that rounds to it: 3.6 (1 decimal) is [3.55, 3.65), "
    '"24 million" (decimals -6) is [23.5e6, 24.5e6).',
    "A claim or figure without `decimals` is taken as printed with the decimals it is written with "
    "(0.25 -> 2 decimals, 18 -> 0).",
    "A claim is consistent when the recomputed value rounds to the stated one; 'within input rounding' "
    "means it only can for some values the printed inputs stand for.",
    "A claim that rests on an implied figure (solved from another claim, never printed) is unverifiable.",
    "Alternative readings are searched over the figures nearest the claim (all of a file of up to "
    "64; in a bigger one the claim's own, the related, then those of its dimension, 64 in all) "
    "(and quantities formed by "
    "dividing or multiplying two of them into a unit the file uses), for pairs of the same "
    "dimension; readings that involve only figures unrelated to the claim are counted, not shown.",
    "Figures are related when they appear together in a claim or derived expression, or share a `test` tag.",
]
