"""Printed numbers: the range a printed figure stands for, and numbers printed back.

A published figure such as "3.6 requests/s" is not a point: printed with one decimal it
stands for any value in [3.55, 3.65). `Interval` carries that range through arithmetic
(corner evaluation, exact for the monotone operations claims use). `written_decimals`
reads the decimals from how a number is written (0.25 -> 2), the documented default when a
claims file gives no `decimals`. Units are in `units.py`, expressions in `expr.py`.

Rounding edges: an Interval may hold Fractions (`printed_exact`), so that a verdict whose
ranges only touch is decided exactly: 0.02 (two decimals) x 3 is [0.045, 0.075), which does
not reach "0.08" = [0.075, 0.085), though in floats 0.025 * 3 = 0.07500000000000001 does.

Pure code: no I/O, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import product as _cartesian

# --------------------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """A value `mid` known to lie in [lo, hi] (from printed rounding)."""

    lo: float
    mid: float
    hi: float

    @classmethod
    def exact(cls, value: float) -> Interval:
        return cls(value, value, value)

    @property
    def finite(self) -> bool:
        return all(math.isfinite(x) for x in (self.lo, self.mid, self.hi))

    @classmethod
    def printed(cls, value: float, decimals: int | None) -> Interval:
        """The range a number printed with `decimals` decimals stands for (negative: tens, ...)."""
        if decimals is None:
            return cls.exact(value)
        half = 0.5 * 10.0 ** (-decimals)
        return cls(value - half, value, value + half)

    @classmethod
    def printed_exact(cls, value: float, decimals: int | None) -> Interval:
        """`printed` in Fractions: the number as written (its shortest repr) and an exact half-step."""
        v = Fraction(repr(float(value)))
        if decimals is None:
            return cls(v, v, v)  # type: ignore[arg-type]
        half = Fraction(1, 2) * Fraction(10) ** (-decimals)
        return cls(v - half, v, v + half)  # type: ignore[arg-type]

    def _combine(self, other: Interval, op: Callable[[float, float], float]) -> Interval:
        corners = [op(a, b) for a, b in _cartesian((self.lo, self.hi), (other.lo, other.hi))]
        return Interval(min(corners), op(self.mid, other.mid), max(corners))

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.lo + other.lo, self.mid + other.mid, self.hi + other.hi)

    def __sub__(self, other: Interval) -> Interval:
        return Interval(self.lo - other.hi, self.mid - other.mid, self.hi - other.lo)

    def __mul__(self, other: Interval) -> Interval:
        return self._combine(other, lambda a, b: a * b)

    def __truediv__(self, other: Interval) -> Interval:
        if other.mid == 0:
            raise ZeroDivisionError("division by zero")
        if other.lo <= 0 <= other.hi:
            # the divisor's printed range straddles zero: the quotient is unbounded, and an
            # unbounded range would let any stated value pass; compare the printed values only
            return Interval.exact(self.mid / other.mid)
        return self._combine(other, lambda a, b: a / b)

    def __pow__(self, other: Interval) -> Interval:
        def power(a: float, b: float) -> float:
            r = float(a) ** float(b)  # never exact: a Fraction power can be astronomically large
            if isinstance(r, complex):
                raise ValueError(f"({a:g}) ** {b:g} has no real value")
            return r

        return self._combine(other, power)

    def __neg__(self) -> Interval:
        return Interval(-self.hi, -self.mid, -self.lo)

    def scale(self, k: float) -> Interval:
        return self * Interval.exact(k)

    def abs(self) -> Interval:
        if self.lo >= 0:
            return self
        if self.hi <= 0:
            return -self
        return Interval(0, abs(self.mid), max(-self.lo, self.hi))

    def overlaps(self, other: Interval) -> bool:
        return (self.lo < other.hi and other.lo < self.hi) or self.lo == other.lo

    def contains(self, x: float) -> bool:
        return self.lo <= x < self.hi or (self.lo == self.hi == x)


def stated_range(value: float, decimals: int | None) -> tuple[float, float]:
    iv = Interval.printed(value, decimals)
    return iv.lo, iv.hi


def rounds_to(x: float, lo: float, hi: float) -> bool:
    eps = 1e-9 * max(1.0, abs(x))
    return lo - eps <= x < hi - eps or (lo == hi and abs(x - lo) <= eps)


def exact_range(value: float, decimals: int | None) -> tuple[float, float]:
    """`stated_range` in Fractions (typed as the floats they stand in for, like Interval's fields)."""
    iv = Interval.printed_exact(value, decimals)
    return iv.lo, iv.hi


def match(iv: Interval, lo: float, hi: float, exact: bool = False) -> str | None:
    """ "exact", "within input rounding" or None; `exact`: Fractions, compared without tolerance."""
    if exact:
        if lo <= iv.mid < hi or lo == hi == iv.mid:
            return "exact"
        if lo == hi:
            return "within input rounding" if iv.lo <= lo <= iv.hi else None
        return "within input rounding" if iv.lo < hi and lo < iv.hi else None
    if rounds_to(iv.mid, lo, hi):
        return "exact"
    if lo == hi:
        return "within input rounding" if iv.lo <= lo <= iv.hi else None
    # ranges that only touch (in float noise: 0.065 + 0.01 = 0.07500000000000001) do not overlap
    eps = 1e-9 * max(abs(lo), abs(hi), abs(iv.lo), abs(iv.hi))
    if iv.lo < hi - eps and lo < iv.hi - eps:
        return "within input rounding"
    return None


def fmt_num(value: float, decimals: int | None = None, sig: int = 4) -> str:
    """Format like a human would print it: thousands separators, sensible decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if decimals is not None:
        d = max(decimals, 0)
        return f"{value:,.{d}f}"
    mag = abs(value)
    if mag == 0:
        return "0"
    if float(value).is_integer() and mag < 1e15:
        return f"{int(value):,}"
    if mag >= 10**sig:
        return f"{value:,.0f}"
    digits = max(0, sig - 1 - math.floor(math.log10(mag)))
    return f"{value:,.{digits}f}"


def fmt_against(value: float, lo: float, hi: float, decimals: int | None) -> str:
    """`value` with one decimal more than the stated number, at least two significant digits, and
    more where fewer would print it on the wrong side of the stated range [lo, hi): 9.467 against
    "10x" ([9.5, 10.5)) prints as 9.47, not as the 9.5 a consistent value would print as."""
    if decimals is None or not math.isfinite(value):
        return fmt_num(value)
    d = max(decimals + 1, 0)
    if value != 0:
        d = max(d, 1 - math.floor(math.log10(abs(value))))
    inside = lo <= value < hi
    text = fmt_num(value, d)
    for extra in range(1, 10):
        if (lo <= float(text.replace(",", "")) < hi) == inside:
            break
        text = fmt_num(value, d + extra)
    return text


def written_decimals(text: str) -> int:
    """Decimals a number is written with: "0.25" -> 2, "18" -> 0, "1.5e3" -> -2, "2.5e-3" -> 4.

    A number written without a fraction counts as exact to the unit (24000000 -> 0): write
    `decimals: -6` for "24 million".
    """
    t = text.strip().lower().lstrip("+-").replace("_", "")
    mantissa, _, exp = t.partition("e")
    frac = mantissa.partition(".")[2]
    try:
        shift = int(exp) if exp else 0
    except ValueError:
        shift = 0
    return max(-15, min(15, len(frac) - shift))
