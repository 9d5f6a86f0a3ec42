"""The claims files' expression language: parsed, checked for dimensions, evaluated, solved.

An expression is figure ids, numbers, ``+ - * / **`` and the FUNCTIONS below, parsed with
`ast` and walked by hand: nothing is ever handed to Python's eval, so no attribute,
subscript, lambda or call outside the table can run. Everything a user can get wrong is an
`ExprError` (one line, the file error): unknown names, wrong arity, a function used as a
value, numbers too large, powers of quantities with units, results that overflow or are
complex. `expr_dims` gives the expression's dimension or says which two units clash.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction

from kvbench.audit.quantities import Interval
from kvbench.audit.units import Dims, dims_text, multiply_dims

#: functions a claims expression may call; each takes and returns Intervals
FUNCTIONS: dict[str, Callable[..., Interval]] = {
    "ratio": lambda a, b: a / b,
    "quotient": lambda a, b: a / b,
    "difference": lambda a, b: a - b,
    # percentages are returned as fractions; a claim with unit "%" shows them x 100
    # an int 1 stays exact with Fractions (rounding edges) and becomes a float with floats
    "percent_change": lambda old, new: new / old - Interval.exact(1),
    "percent_drop": lambda old, new: Interval.exact(1) - new / old,
    "percent_increase": lambda old, new: new / old - Interval.exact(1),
    "percent_of": lambda part, whole: part / whole,
    "reciprocal": lambda a: Interval.exact(1) / a,
    "abs": lambda a: a.abs(),
}


def _sum(*xs: Interval) -> Interval:
    total = Interval.exact(0)
    for x in xs:
        total = total + x
    return total


def _product(*xs: Interval) -> Interval:
    total = Interval.exact(1)
    for x in xs:
        total = total * x
    return total


FUNCTIONS["sum"] = _sum
FUNCTIONS["product"] = _product

#: (fewest, most) arguments; None = any number
ARITY: dict[str, tuple[int, int | None]] = {name: (2, 2) for name in FUNCTIONS}
ARITY |= {"reciprocal": (1, 1), "abs": (1, 1), "sum": (1, None), "product": (1, None)}

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

#: a literal beyond this is a typo or an attack, not a published number
MAX_LITERAL = 1e100

_ALLOWED_BINOPS: dict[type, Callable[[Interval, Interval], Interval]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}


class ExprError(ValueError):
    """A claims expression that does not parse, names something unknown or cannot be computed."""


def _check_node(node: ast.AST, names: set[str], called: set[int]) -> None:
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            fname = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise ExprError(f"unknown function '{fname}' (known: {', '.join(sorted(FUNCTIONS))})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExprError("keyword and starred arguments are not allowed")
        lo, hi = ARITY[node.func.id]
        n = len(node.args)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"at least {lo}"
            raise ExprError(f"{node.func.id}() takes {want} argument(s), got {n}: {ast.unparse(node)}")
        called.add(id(node.func))
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS and id(node) not in called:
            raise ExprError(f"function '{node.id}' used as a value (call it, e.g. {node.id}(a, b))")
        if node.id not in names and node.id not in FUNCTIONS:
            raise ExprError(f"unknown figure '{node.id}'")
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, int | float) or isinstance(node.value, bool):
            raise ExprError(f"only numbers may appear as constants, not {node.value!r}")
        try:
            value = float(node.value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value) or abs(value) > MAX_LITERAL:
            raise ExprError(f"number too large: {ast.unparse(node)[:20]}")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _ALLOWED_BINOPS:
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.UAdd):
            raise ExprError("only unary minus is allowed")
    elif not isinstance(node, ast.Expression | ast.Load | ast.operator | ast.unaryop):
        raise ExprError(f"{type(node).__name__} is not allowed in an expression")


def parse_expr(text: str, known: Iterable[str]) -> ast.Expression:
    """Parse and check an expression: numbers, figure ids, + - * / **, the FUNCTIONS."""
    if not isinstance(text, str) or len(text) > 2000:
        raise ExprError("an expression must be text of at most 2,000 characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExprError(f"not a valid expression: {text[:80]!r}") from None
    names = set(known)
    called: set[int] = set()
    for node in ast.walk(tree):  # breadth-first: a Call is seen before its func Name
        _check_node(node, names, called)
    return tree


def expr_names(tree: ast.Expression) -> list[str]:
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS and node.id not in out:
            out.append(node.id)
    return out


def _eval(node: ast.AST, env: Mapping[str, Interval], exact: bool) -> Interval:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, exact)
    if isinstance(node, ast.Constant):
        c = node.value  # a number: checked in parse_expr
        if exact:
            return Interval.exact(Fraction(repr(c)) if isinstance(c, float) else Fraction(c))  # type: ignore[arg-type]
        return Interval.exact(float(c))  # type: ignore[arg-type]
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, exact)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        return _ALLOWED_BINOPS[type(node.op)](_eval(node.left, env, exact), _eval(node.right, env, exact))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return FUNCTIONS[node.func.id](*[_eval(a, env, exact) for a in node.args])
    raise ExprError(f"cannot evaluate {ast.unparse(node)}")


def eval_expr(tree: ast.Expression | ast.AST, env: Mapping[str, Interval], exact: bool = False) -> Interval:
    """Evaluate in base units. ZeroDivisionError passes through (the caller names the figures);
    overflow, complex or infinite results are ExprErrors. `exact`: constants as Fractions (the
    env then holds Fractions too), for verdicts at rounding edges."""
    try:
        out = _eval(tree, env, exact)
    except OverflowError:
        raise ExprError("the result overflows (numbers too large)") from None
    except ValueError as exc:
        if isinstance(exc, ExprError):
            raise
        raise ExprError(f"no real result: {exc}") from None
    if not out.finite:
        raise ExprError("the result overflows (numbers too large)")
    return out


def _const_exponent(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _const_exponent(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    return None


def expr_dims(tree: ast.Expression | ast.AST, dims: Mapping[str, tuple[Dims, str]]) -> tuple[Dims, str]:
    """(dimension, unit text) of an expression; ExprError naming the two units that clash.

    `dims` maps a figure id to its (dimension, unit text as written).
    """
    node = tree.body if isinstance(tree, ast.Expression) else tree
    if isinstance(node, ast.Constant):
        return (), "a number"
    if isinstance(node, ast.Name):
        return dims[node.id]
    if isinstance(node, ast.UnaryOp):
        return expr_dims(node.operand, dims)
    if isinstance(node, ast.BinOp):
        a, b = expr_dims(node.left, dims), expr_dims(node.right, dims)
        if isinstance(node.op, ast.Add | ast.Sub):
            return _same(a, b, "add" if isinstance(node.op, ast.Add) else "subtract", node)
        if isinstance(node.op, ast.Mult | ast.Div):
            d = multiply_dims(a[0], b[0], 1 if isinstance(node.op, ast.Mult) else -1)
            return d, dims_text(d)
        return _power(a, b, node)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    name = node.func.id
    args = [expr_dims(x, dims) for x in node.args]
    if name in ("ratio", "quotient"):
        d = multiply_dims(args[0][0], args[1][0], -1)
        return d, dims_text(d)
    if name in ("difference", "sum", "abs"):
        out = args[0]
        for other in args[1:]:
            out = _same(out, other, "add" if name == "sum" else "subtract", node)
        return out
    if name.startswith("percent_"):
        _same(args[0], args[1], "compare", node)
        return (), "a number"
    if name == "reciprocal":
        d = multiply_dims((), args[0][0], -1)
        return d, dims_text(d)
    out_d: Dims = ()
    for a in args:  # product
        out_d = multiply_dims(out_d, a[0])
    return out_d, dims_text(out_d)


def _same(a: tuple[Dims, str], b: tuple[Dims, str], verb: str, node: ast.AST) -> tuple[Dims, str]:
    if a[0] != b[0]:
        raise ExprError(f"cannot {verb} {a[1]} and {b[1]} in {ast.unparse(node)}")
    return a


def _power(a: tuple[Dims, str], b: tuple[Dims, str], node: ast.BinOp) -> tuple[Dims, str]:
    if b[0]:
        raise ExprError(f"an exponent must be a plain number, not {b[1]}: {ast.unparse(node)}")
    if not a[0]:
        return (), "a number"
    k = _const_exponent(node.right)
    if k is None or not k.is_integer() or abs(k) > 12:
        raise ExprError(
            f"a quantity in {a[1]} can only be raised to a small whole constant power: {ast.unparse(node)}"
        )
    d = tuple((name, v * int(k)) for name, v in a[0])
    return d, dims_text(d)


def solve_scalar(f: Callable[[float], float], target: float) -> float | None:
    """An x with f(x) == target, by secant iteration on x and on 1/x (a divisor), else None."""
    tol = 1e-9 * max(1.0, abs(target))

    def secant(g: Callable[[float], float], x0: float, x1: float) -> float | None:
        try:
            f0, f1 = g(x0) - target, g(x1) - target
            for _ in range(200):
                if abs(f1) < tol:
                    return x1
                if f1 == f0:
                    return None
                x0, x1, f0 = x1, x1 - f1 * (x1 - x0) / (f1 - f0), f1
                if not math.isfinite(x1):
                    return None
                f1 = g(x1) - target
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
        return x1 if abs(f1) < tol else None

    scale = abs(target) or 1.0
    for x0, x1 in ((1.0, 2.0), (scale, 2.0 * scale)):
        x = secant(f, x0, x1)
        if x is not None:
            return x
        u = secant(lambda v: f(1.0 / v), 1.0 / x0, 1.0 / x1)
        if u is not None and u != 0:
            return 1.0 / u
    return None
