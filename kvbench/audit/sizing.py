"""The sizing check: do the stated tokens, prompts, requests and bytes fit the model's KV size?

Tries every reading: tokens counted with repeats or only distinct prompts, sliding layers
holding their window or stored at full size, the stated unit or its sibling (GB/GiB), and
says which fit. Per-prompt and per-request lengths are held against the context length: a
token count that would make each distinct prompt longer than the context must count repeats.
"""

from __future__ import annotations

from typing import Any

from kvbench.audit.figures import Figures, geometry_of
from kvbench.audit.ledger import conclusion
from kvbench.audit.quantities import Interval, fmt_num, match
from kvbench.audit.schema import SizingCheck
from kvbench.audit.units import Unit, parse_unit, sibling_units
from kvbench.errors import UsageError


def _positive(figs: Figures, ref: str, check: SizingCheck) -> Interval:
    iv = figs[ref].interval
    if figs[ref].invalid is not None:
        raise UsageError(f"sizing '{check.id}': uses invalid figure '{ref}'")
    if iv is None or not iv.mid > 0:
        raise UsageError(f"sizing '{check.id}': figure '{ref}' must be a positive published number")
    return iv.scale(figs.units[ref].factor)


def _length_notes(
    check: SizingCheck, t: float, requests: float, prompts: float, ctx: int | None
) -> list[str]:
    per_request, per_prompt = t / requests, t / prompts
    fits_req = (
        "" if not ctx else f" ({'fits' if per_request <= ctx else 'EXCEEDS'} the {ctx:,}-token context)"
    )
    notes = [
        f"{fmt_num(t)} tokens over {fmt_num(requests)} requests = {fmt_num(per_request)} "
        f"tokens per request{fits_req}"
    ]
    text = (
        f"if the {fmt_num(t)} tokens were the {fmt_num(prompts)} distinct prompts: "
        f"{fmt_num(per_prompt)} tokens per prompt"
    )
    if ctx:
        over = per_prompt > ctx
        text += (
            f" ({'EXCEEDS' if over else 'fits'} the {ctx:,}-token context, so the stated tokens "
            f"{'must' if over else 'may'} count repeats)"
        )
    return [*notes, text]


def _rows(
    bases: list[tuple[str, Interval, float]],
    variants: list[tuple[str, float, float]],
    units: list[Unit],
    lo: float,
    hi: float,
) -> list[dict[str, Any]]:
    """Every (tokens reading x layers reading) in every unit, with the units its bytes fit in."""
    rows: list[dict[str, Any]] = []
    for basis, t, sequences in bases:
        for layers, bpt, extra in variants:
            b = t.scale(bpt) + Interval.exact(extra * sequences)
            row: dict[str, Any] = {"tokens": basis, "layers": layers, "bytes_per_token": bpt, "bytes": b.mid}
            fits: list[str] = []
            for u in units:
                v = b.scale(1.0 / u.factor)
                row[u.text] = v.mid
                m = match(v, lo, hi)
                if m is not None:
                    fits.append(f"{u.text} ({m})")
            row["fits"] = fits
            rows.append(row)
    return rows


def _big(x: float) -> str:
    """24,000,000 -> '24M' for the one-line conclusion; other numbers as fmt_num prints them."""
    return f"{x / 1e6:g}M" if x >= 1e6 and (x / 1e6) * 10 == int((x / 1e6) * 10) else fmt_num(x)


def sizing_check(figs: Figures, check: SizingCheck) -> dict[str, Any]:
    assert figs.cf.model is not None or check.geometry is not None
    geo = geometry_of(check.geometry if check.geometry is not None else figs.cf.model.geometry, figs.cf)  # type: ignore[union-attr]
    t_iv = _positive(figs, check.tokens, check)
    nbytes = figs[check.bytes]
    stated_unit = figs.units[check.bytes]
    if nbytes.invalid is not None:
        raise UsageError(f"sizing '{check.id}': uses invalid figure '{check.bytes}'")
    if nbytes.interval is None:
        raise UsageError(f"sizing '{check.id}': figure '{check.bytes}' has no value")
    stated_iv = Interval.printed(nbytes.interval.mid, nbytes.decimals)
    lo, hi = stated_iv.lo, stated_iv.hi
    bases: list[tuple[str, Interval, float]] = [(f"{fmt_num(t_iv.mid)} tokens as stated", t_iv, 1.0)]
    notes: list[str] = []
    per_request = per_prompt = None
    ctx = geo.context_length
    if check.requests and check.prompts:
        requests = _positive(figs, check.requests, check).mid
        prompts = _positive(figs, check.prompts, check).mid
        bases = [
            (
                f"{fmt_num(t_iv.mid)} tokens: all {fmt_num(requests)} requests, repeats counted",
                t_iv,
                requests,
            ),
            (
                f"{fmt_num(t_iv.mid * prompts / requests)} distinct tokens: {fmt_num(prompts)} prompts, "
                f"each used {fmt_num(requests / prompts)}x",
                t_iv.scale(prompts / requests),
                prompts,
            ),
        ]
        per_request, per_prompt = t_iv.mid / requests, t_iv.mid / prompts
        notes += _length_notes(check, t_iv.mid, requests, prompts, ctx)
    window = geo.window_bytes_per_sequence
    variants = [
        (
            f"{geo.num_full_layers} full-attention layers + sliding windows",
            geo.bytes_per_token(False),
            window,
        ),
        (f"all {geo.num_layers} layers (sliding at full size)", geo.bytes_per_token(True), 0.0),
    ]
    # the stated number read in its own unit and in each sibling (825 "GB" that is really GiB)
    units = [stated_unit] + [parse_unit(u, figs.cf.units) for u in sibling_units(stated_unit)]
    rows = _rows(bases, variants, units, lo, hi)
    if window:
        notes.append(
            f"sliding layers holding only their {geo.sliding_window}-token window keep "
            f"{window / 1e6:,.1f} MB per sequence (counted once per request or prompt)"
        )
    fit_rows = [r for r in rows if r["fits"]]
    if len(fit_rows) > 1 and len({round(r["bytes"], -6) for r in fit_rows}) == 1:
        notes.append(
            "the readings that fit give the same bytes (half the tokens at twice the bytes per token): "
            "the published figures cannot tell them apart"
        )
    stated = f"{fmt_num(nbytes.interval.mid, nbytes.decimals)} {nbytes.unit}"
    fitting = [f"{r['tokens']} x {r['layers']} in {', '.join(r['fits'])}" for r in fit_rows]
    in_own_unit = any(f.startswith(f"{stated_unit.text} ") for r in fit_rows for f in r["fits"])
    too_long = per_prompt is not None and ctx is not None and per_prompt > ctx
    findings: list[str] = []
    asides: list[str] = []
    if too_long and per_prompt is not None and per_request is not None:
        repeats = (
            f"{_big(t_iv.mid)} tokens / {fmt_num(t_iv.mid / per_prompt)} prompts = {fmt_num(per_prompt)} "
            f"tokens per prompt > the {ctx:,}-token context: the count must include repeats"
        )
        # a contradiction only when the bytes fit the distinct reading alone; else it says how to read
        # the count, which a paper counting every request's tokens (a clean one) does not contradict
        only_distinct = bool(fit_rows) and not any("repeats counted" in r["tokens"] for r in fit_rows)
        (findings if only_distinct else asides).append(repeats)
    if not fit_rows:
        findings.append(f"no reading of the tokens and the model gives {stated}")
    elif not in_own_unit:
        alt = fit_rows[0]["fits"][0].split(" ")[0]
        findings.append(f"{stated} fits only as {alt}")
    return {
        "id": check.id,
        "description": check.description,
        "model": geo.name,
        "stated": stated,
        "stated_range": [lo, hi],
        "rows": rows,
        "units": [u.text for u in units],
        "readings_that_fit": fitting,
        "fits": bool(fitting),
        **conclusion(findings, f"{stated} fits: " + "; ".join(fitting[:1]), asides),
        "notes": notes,
        "tokens_per_request": per_request,
        "tokens_per_prompt_if_distinct": per_prompt,
    }
