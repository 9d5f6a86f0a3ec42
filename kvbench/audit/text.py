"""The ledger as text: a verdict table first, then the details of each finding, wrapped to a width
(`kvbench audit`: the terminal's, 100 columns when not a terminal).

The verdict table has one line per claim, sizing check and bound with a short conclusion,
so the strongest findings are read first; the summary line counts bound findings too.
Below it: each claim (stated as written, recomputed, notes, readings), each sizing check
and bound, the figures, and the assumptions.
"""

from __future__ import annotations

import textwrap
from contextvars import ContextVar
from typing import Any

from kvbench.audit.bounds import BOUND_KINDS
from kvbench.audit.claims import fmt_iv
from kvbench.audit.ledger import ClaimResult, Ledger
from kvbench.audit.quantities import fmt_num

WIDTH = 100
_WIDTH: ContextVar[int] = ContextVar("audit_text_width", default=WIDTH)
MARK = {"consistent": "ok", "discrepancy": "!!", "unverifiable": "??", "finding": "!!", "ok": "ok"}
MARK["invalid"] = "xx"
WORD = {"consistent": "consistent", "discrepancy": "DISCREPANCY", "unverifiable": "unverifiable"}
WORD |= {"finding": "FINDING", "ok": "ok", "invalid": "INVALID"}


def _wrap(text: str, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        width=_WIDTH.get(),
        initial_indent=first if first is not None else indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [first or indent]


def summary_line(ledger: Ledger) -> str:
    s = ledger.summary()
    text = (
        f"{len(ledger.claims)} claims: {s['consistent']} consistent, {s['discrepancy']} discrepancy, "
        f"{s['unverifiable']} unverifiable"
    )
    text += f", {s['invalid']} invalid" if s["invalid"] else ""
    text += f"; {s['figures_invalid']} invalid figure(s)" if s["figures_invalid"] else ""
    if ledger.sizing:
        text += f"; {len(ledger.sizing)} sizing check(s): {s['sizing_findings']} finding(s)"
        text += f", {s['sizing_invalid']} invalid" if s["sizing_invalid"] else ""
    if ledger.bounds:
        text += f"; {len(ledger.bounds)} bounds: {s['bound_findings']} finding(s), {s['bounds_ok']} ok"
        text += f", {s['bounds_invalid']} invalid" if s["bounds_invalid"] else ""
    return text


def verdict_table(ledger: Ledger) -> list[str]:
    rows = ledger.verdicts()
    width = max((len(r["id"]) + len(r["what"]) + 1 for r in rows), default=10)
    invalid = ", xx invalid" if any(r["verdict"] == "invalid" for r in rows) else ""
    legend = f"(!! finding or discrepancy, ?? unverifiable{invalid}, ok consistent; details below)"
    out = _wrap(legend, "           ", "VERDICTS   ")
    hang = " " * (width + 7) if width + 7 <= _WIDTH.get() // 2 else " " * 7
    for r in rows:
        label = r["id"] if r["what"] == "claim" else f"{r['what']} {r['id']}"
        out += _wrap(r["conclusion"], hang, f"  {MARK[r['verdict']]} {label:<{width}}  ")
    return out


def _claim_lines(c: ClaimResult) -> list[str]:
    if c.verdict == "consistent" and not c.notes and not c.assumptions and c.recomputed is not None:
        # nothing to explain: one line with what was checked
        text = f"{c.expr} = {fmt_iv(c.recomputed)} {c.unit}, stated {c.stated_text}"
        return _wrap(text.replace(" x,", "x,").replace(" %,", "%,"), "     ", f"ok {c.id}: ")
    out = _wrap(f"{MARK[c.verdict]} [{WORD[c.verdict]}] {c.id}: {c.description}".rstrip(": "), "     ", "")
    if c.verdict == "invalid":
        out += _wrap(c.headline, "             ", "     invalid: ")
        return out + ([f"     fix:     unit: {c.fix}"] if c.fix else [])
    d = None if c.decimals is None else max(c.decimals + 1, 0)
    rng = f"[{fmt_num(c.stated_range[0], d)}, {fmt_num(c.stated_range[1], d)})"
    out.append(f"     stated     {c.stated_text}  (as printed, it stands for {rng})")
    out.append(f"     checked as {c.expr}")
    if c.recomputed is not None:
        out.append(f"     recomputed {fmt_iv(c.recomputed)} {c.unit}".rstrip())
    for n in c.notes:
        out += _wrap(n, "           ", "     note: ")
    for a in c.assumptions:
        out += _wrap(a, "              ", "     assumes: ")
    if c.verdict == "discrepancy":
        if c.readings:
            out.append(f"     readings that would give {c.stated_text}, simplest first:")
            for r in c.readings:
                tag = "" if r.match == "exact" else " (within input rounding)"
                out += _wrap(f"{r.text} = {fmt_num(r.value)} {r.unit}{tag}", "         ", "       - ")
        else:
            out.append("     no reading of the related figures gives the stated value")
        if c.unrelated_matches:
            out.append(
                f"     ({c.unrelated_matches} further matches use unrelated figures: likely coincidences)"
            )
    return out


def _invalid_lines(what: str, x: dict[str, Any]) -> list[str]:
    out = _wrap(f"{what} {x['id']}: {x['description']}".rstrip(": "), "  ", "")
    return out + _wrap(x["verdict"], "     ", "  => INVALID: ")


def _sizing_lines(sz: dict[str, Any]) -> list[str]:
    if sz["status"] == "invalid":
        return _invalid_lines("SIZING", sz)
    out = _wrap(f"SIZING {sz['id']}: {sz['description']}", "  ", "")
    out.append(f"  model {sz['model']}; stated {sz['stated']}")
    units = sz["units"]
    for r in sz["rows"]:
        vals = ", ".join(f"{fmt_num(r[u], 1)} {u}" for u in units)
        fits = ", ".join(r["fits"]) or "-"
        out += _wrap(f"{r['tokens']} x {r['layers']}: {vals}; fits: {fits}", "      ", "  - ")
    for n in sz["notes"]:
        out += _wrap(n, "        ", "  note: ")
    out += _wrap(sz["headline"], "     ", "  => ")
    return out


def _bound_lines(b: dict[str, Any]) -> list[str]:
    if b["status"] == "invalid":
        return _invalid_lines("BOUND", b)
    out = _wrap(f"BOUND {b['id']} ({b['kind']}): {b['description']}", "  ", "")
    if "basis" in b:
        out += _wrap(f"basis: {b['basis']}", "    ", "  ")
    out.append("  assumptions:")
    for a in b["assumptions"]:
        out += _wrap(a, "      ", "    - ")
    for line in BOUND_KINDS[b["kind"]].lines(b):
        out += _wrap(line, "      ", "  ") if len(line) > _WIDTH.get() - 2 else [f"  {line}"]
    out += _wrap(b["verdict"], "     ", "  => ")
    out += _wrap(b["note"], "        ", "  note: ")
    return out


def _figure_lines(ledger: Ledger) -> list[str]:
    out = _wrap(
        "(published = as printed; derived/model/implied = kvbench's arithmetic)", "        ", "FIGURES "
    )
    w = max((len(f.id) for f in ledger.figures), default=10)
    for f in ledger.figures:
        if f.invalid is not None:
            val = "invalid"
        elif f.interval is None:
            val = "not published"
        else:
            val = fmt_num(f.interval.mid, f.decimals if f.kind == "published" else None)
        how = f.kind
        if f.expr:
            how += f" = {f.expr}"
        if f.implied_by:
            how += f" by claim {f.implied_by}"
        if f.kind == "derived" and f.basis == "implied":
            how += " (rests on an implied figure)"
        out.append(f"  {f.id:<{w}}  {val:>14} {f.unit:<14} {how}"[: _WIDTH.get()].rstrip())
    return out


def format_ledger(ledger: Ledger, width: int = WIDTH) -> str:
    """The ledger as plain text (what `kvbench audit` prints), wrapped at `width` columns."""
    token = _WIDTH.set(max(width, 60))
    try:
        return _format(ledger)
    finally:
        _WIDTH.reset(token)


def _format(ledger: Ledger) -> str:
    out = _wrap(f"Audit of {ledger.name}: {ledger.title}".rstrip(": "), "  ", "")
    out += [*_wrap(summary_line(ledger), "    ", "  "), ""]
    out += verdict_table(ledger)
    out += ["", "CLAIMS"]
    for c in ledger.claims:
        out += _claim_lines(c)
    for sz in ledger.sizing:
        out += ["", *_sizing_lines(sz)]
    for b in ledger.bounds:
        out += ["", *_bound_lines(b)]
    out += ["", *_figure_lines(ledger), "", "ASSUMPTIONS"]
    for a in ledger.assumptions:
        out += _wrap(a, "    ", "  - ")
    return "\n".join(out)
