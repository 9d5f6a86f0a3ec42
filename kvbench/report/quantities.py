"""Numbers with units and printed rounding: the arithmetic under `kvbench audit`.

A published figure such as "3.6 requests/s" is not a point: printed with one
decimal it stands for any value in [3.55, 3.65). `Interval` carries that range
through arithmetic (corner evaluation, so it is exact for the monotone
operations used here), `Unit` knows dimensions and scales ("GB" vs "GiB",
"s" vs "ms", "req/s" = requests / time), and `parse_expr` / `eval_expr` read
the small, safe expression language used by claims files.

Pure code: no I/O, no pandas.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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

    @classmethod
    def printed(cls, value: float, decimals: int | None) -> Interval:
        """The range a number printed with `decimals` decimals stands for (negative: tens, ...)."""
        if decimals is None:
            return cls.exact(value)
        half = 0.5 * 10.0 ** (-decimals)
        return cls(value - half, value, value + half)

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
        if other.lo <= 0 <= other.hi:
            if other.mid == 0:
                raise ZeroDivisionError("division by zero")
            # the range straddles zero: only the point value is meaningful
            return Interval(-math.inf, self.mid / other.mid, math.inf)
        return self._combine(other, lambda a, b: a / b)

    def __pow__(self, other: Interval) -> Interval:
        return self._combine(other, lambda a, b: a**b)

    def __neg__(self) -> Interval:
        return Interval(-self.hi, -self.mid, -self.lo)

    def scale(self, k: float) -> Interval:
        return self * Interval.exact(k)

    def abs(self) -> Interval:
        if self.lo >= 0:
            return self
        if self.hi <= 0:
            return -self
        return Interval(0.0, abs(self.mid), max(-self.lo, self.hi))

    def overlaps(self, other: Interval) -> bool:
        return (self.lo < other.hi and other.lo < self.hi) or self.lo == other.lo

    def contains(self, x: float) -> bool:
        return self.lo <= x < self.hi or (self.lo == self.hi == x)


# --------------------------------------------------------------------------- units

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_ALIASES = {
    "req": "requests",
    "request": "requests",
    "token": "tokens",
    "tok": "tokens",
    "prompt": "prompts",
    "byte": "B",
    "bytes": "B",
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "connection": "connections",
    "client": "clients",
}
_DIMENSIONLESS = {"": 1.0, "x": 1.0, "%": 0.01, "1": 1.0, "count": 1.0}


def _atom(name: str) -> tuple[dict[str, int], float]:
    name = name.strip()
    name = _ALIASES.get(name, name)
    if name in _DIMENSIONLESS:
        return {}, _DIMENSIONLESS[name]
    if name in _TIME:
        return {"time": 1}, _TIME[name]
    if name.endswith("B") and (name[:-1] in _PREFIX or name[:-1] in _BINARY):
        p = name[:-1]
        return {"bytes": 1}, _BINARY.get(p, _PREFIX.get(p, 1.0))
    if name.endswith("bit") and name[:-3] in _PREFIX:
        return {"bytes": 1}, _PREFIX[name[:-3]] / 8
    # "Mtokens", "ktokens": an SI prefix on a known counted thing
    for p, k in _PREFIX.items():
        if (
            p
            and name.startswith(p)
            and _ALIASES.get(name[len(p) :], name[len(p) :])
            in {
                "tokens",
                "requests",
                "prompts",
            }
        ):
            return {_ALIASES.get(name[len(p) :], name[len(p) :]): 1}, k
    return {name: 1}, 1.0  # any other word is its own dimension (user-defined)


@dataclass(frozen=True)
class Unit:
    """A parsed unit: dimension exponents and the factor to base units (s, B, counts)."""

    text: str
    dims: tuple[tuple[str, int], ...]
    factor: float

    @property
    def dimensionless(self) -> bool:
        return not self.dims

    @property
    def is_percent(self) -> bool:
        return self.text.strip() == "%"

    @property
    def is_ratio(self) -> bool:
        return self.text.strip() in {"x", ""}


def parse_unit(text: str) -> Unit:
    """Parse "req/s", "GB/s", "B/token", "tokens/request", "GiB", "%", "x" ..."""
    dims: dict[str, int] = {}
    factor = 1.0
    parts = text.replace(" per ", "/").split("/")
    for i, part in enumerate(parts):
        sign = 1 if i == 0 else -1
        for atom in part.split("*"):
            if not atom.strip() and i > 0:
                raise ValueError(f"bad unit {text!r}")
            d, f = _atom(atom)
            for k, v in d.items():
                dims[k] = dims.get(k, 0) + sign * v
            factor = factor * f if sign > 0 else factor / f
    clean = tuple(sorted((k, v) for k, v in dims.items() if v))
    return Unit(text, clean, factor)


def same_dimension(a: Unit, b: Unit) -> bool:
    return a.dims == b.dims


def multiply_dims(a: Unit, b: Unit, power: int = 1) -> tuple[tuple[str, int], ...]:
    dims = dict(a.dims)
    for k, v in b.dims:
        dims[k] = dims.get(k, 0) + power * v
    return tuple(sorted((k, v) for k, v in dims.items() if v))


def sibling_units(unit: Unit) -> list[str]:
    """Units a careless writer might confuse with `unit`: GB vs GiB, s vs ms, GB/s vs GiB/s."""
    text = unit.text.strip()
    out: list[str] = []
    swaps = [("GiB", "GB"), ("MiB", "MB"), ("TiB", "TB"), ("KiB", "kB"), ("GB", "GiB"), ("MB", "MiB")]
    swaps += [("TB", "TiB"), ("kB", "KiB")]
    for a, b in swaps:
        if a in text:
            out.append(text.replace(a, b, 1))
    if unit.dims == (("time", 1),):
        out += [u for u in ("s", "ms", "min") if u != text]
    seen: list[str] = []
    for u in out:
        if u not in seen and u != text:
            seen.append(u)
    return seen


def convert(value: float, src: Unit, dst: Unit) -> float:
    if src.dims != dst.dims:
        raise ValueError(f"cannot convert {src.text} to {dst.text}")
    return value * src.factor / dst.factor


# --------------------------------------------------------------------------- expressions

#: functions a claims expression may call; each takes and returns Intervals
FUNCTIONS: dict[str, Callable[..., Interval]] = {
    "ratio": lambda a, b: a / b,
    "quotient": lambda a, b: a / b,
    "difference": lambda a, b: a - b,
    # percentages are returned as fractions; a claim with unit "%" shows them x 100
    "percent_change": lambda old, new: new / old - Interval.exact(1.0),
    "percent_drop": lambda old, new: Interval.exact(1.0) - new / old,
    "percent_increase": lambda old, new: new / old - Interval.exact(1.0),
    "percent_of": lambda part, whole: part / whole,
    "reciprocal": lambda a: Interval.exact(1.0) / a,
    "abs": lambda a: a.abs(),
}


def _sum(*xs: Interval) -> Interval:
    total = Interval.exact(0.0)
    for x in xs:
        total = total + x
    return total


def _product(*xs: Interval) -> Interval:
    total = Interval.exact(1.0)
    for x in xs:
        total = total * x
    return total


FUNCTIONS["sum"] = _sum
FUNCTIONS["product"] = _product

FUNCTION_HELP = {
    "ratio(a, b)": "a / b (a speedup 'Nx')",
    "quotient(a, b)": "a / b",
    "difference(a, b)": "a - b",
    "sum(a, b, ...)": "a + b + ...",
    "product(a, b, ...)": "a * b * ...",
    "percent_change(old, new)": "new / old - 1 (shown x 100 when the unit is %)",
    "percent_increase(old, new)": "same as percent_change",
    "percent_drop(old, new)": "1 - new / old, a reduction relative to old",
    "percent_of(part, whole)": "part / whole",
    "reciprocal(a)": "1 / a",
    "abs(a)": "|a|",
}

_ALLOWED_BINOPS: dict[type, Callable[[Interval, Interval], Interval]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}


class ExprError(ValueError):
    """A claims expression that does not parse or names something unknown."""


def parse_expr(text: str, known: Iterable[str]) -> ast.Expression:
    """Parse and check an expression: numbers, figure ids, + - * / **, the FUNCTIONS."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not a valid expression: {text!r}") from exc
    names = set(known)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                fname = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExprError(f"unknown function '{fname}' (known: {', '.join(sorted(FUNCTIONS))})")
            if node.keywords:
                raise ExprError("keyword arguments are not allowed")
        elif isinstance(node, ast.Name):
            if node.id not in names and node.id not in FUNCTIONS:
                raise ExprError(f"unknown figure '{node.id}'")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, int | float) or isinstance(node.value, bool):
                raise ExprError(f"only numbers may appear as constants, not {node.value!r}")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _ALLOWED_BINOPS:
                raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub | ast.UAdd):
                raise ExprError("only unary minus is allowed")
        elif not isinstance(node, ast.Expression | ast.Load | ast.operator | ast.unaryop):
            raise ExprError(f"{type(node).__name__} is not allowed in an expression")
    return tree


def expr_names(tree: ast.Expression) -> list[str]:
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS and node.id not in out:
            out.append(node.id)
    return out


def eval_expr(tree: ast.Expression | ast.AST, env: Mapping[str, Interval]) -> Interval:
    node = tree.body if isinstance(tree, ast.Expression) else tree
    if isinstance(node, ast.Constant):
        return Interval.exact(float(node.value))  # type: ignore[arg-type]  # checked in parse_expr
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        v = eval_expr(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        return _ALLOWED_BINOPS[type(node.op)](eval_expr(node.left, env), eval_expr(node.right, env))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = [eval_expr(a, env) for a in node.args]
        return FUNCTIONS[node.func.id](*args)
    raise ExprError(f"cannot evaluate {ast.unparse(node)}")


def solve_for(tree: ast.Expression, env: Mapping[str, Interval], unknown: str, target: float) -> float | None:
    """The value of `unknown` that makes the expression equal `target` (secant method)."""

    def f(x: float) -> float:
        local = dict(env)
        local[unknown] = Interval.exact(x)
        return eval_expr(tree, local).mid - target

    x0, x1 = 1.0, 2.0
    try:
        f0, f1 = f(x0), f(x1)
        for _ in range(100):
            if f1 == f0:
                break
            x0, x1, f0 = x1, x1 - f1 * (x1 - x0) / (f1 - f0), f1
            f1 = f(x1)
            if abs(f1) < 1e-12 * max(1.0, abs(target)):
                return x1
    except (ZeroDivisionError, OverflowError, ValueError):
        return None
    return x1 if abs(f1) < 1e-9 * max(1.0, abs(target)) else None


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
