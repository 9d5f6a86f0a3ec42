"""What every bound kind provides, and the helpers they share.

A bound kind is one module with a `KIND = BoundKind(...)`: `compute` (the result dict, with
`status` "finding" or "ok" and a one-line `headline` for the verdict table, both set by
`conclude`) and `lines` (its details in the ledger). The fields it reads, their dimensions and
its reference rules are data in `kvbench/audit/bound_fields.py`, below the claims-file model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.errors import UsageError

if TYPE_CHECKING:
    from kvbench.audit.figures import Figures
    from kvbench.audit.ledger import ClaimResult, FigureValue
    from kvbench.audit.schema import Bound


@dataclass
class Context:
    """What a bound may read: the figures, the checked claims and the sizing results."""

    figs: Figures
    claims: list[ClaimResult]
    sizing: list[dict[str, Any]]


@dataclass(frozen=True)
class BoundKind:
    name: str
    compute: Callable[[Context, Bound], dict[str, Any]]
    lines: Callable[[dict[str, Any]], list[str]]


def value(ctx: Context, b: Bound, ref: str | None, positive: bool = False) -> tuple[float, FigureValue]:
    """A bound's figure in base units (s, B, B/s, counts), with the figure it came from."""
    assert ref is not None
    fv = ctx.figs[ref]
    if fv.invalid is not None:
        raise UsageError(f"bounds '{b.id}': uses invalid figure '{ref}'")
    if fv.interval is None:
        raise UsageError(f"bounds '{b.id}': figure '{ref}' has no value (not published)")
    v = fv.interval.mid * ctx.figs.units[ref].factor
    if positive and not v > 0:
        raise UsageError(f"bounds '{b.id}': figure '{ref}' must be positive, not {fv.interval.mid:g}")
    return v, fv


def basis(used: list[FigureValue]) -> str:
    """'published', or which of the figures a bound uses kvbench derived or solved for."""
    other = [f for f in used if f.kind != "published"]
    if not other:
        return "published"
    return "uses " + ", ".join(
        f"{f.id} ({f.kind}{' by ' + f.implied_by if f.implied_by else ''})" for f in other
    )


def stated_of(ctx: Context, claim_id: str) -> float:
    return next(c.stated for c in ctx.claims if c.id == claim_id)
