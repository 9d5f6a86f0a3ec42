"""The claims expression language: what it refuses (one ExprError line each), interval arithmetic
that always contains the true value, dimensions that clash or combine, and the scalar solver."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from kvbench.audit.expr import (
    ARITY,
    FUNCTIONS,
    ExprError,
    eval_expr,
    expr_dims,
    expr_names,
    parse_expr,
    solve_scalar,
)
from kvbench.audit.quantities import Interval

S = (("time", 1),)
B = (("bytes", 1),)
DIMS = {"t": (S, "s"), "u": (S, "ms"), "n": (B, "GB"), "k": ((), "x")}


def _iv(lo: float, hi: float) -> Interval:
    return Interval(lo, (lo + hi) / 2, hi)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a.b", "Attribute is not allowed"),
        ("a[0]", "Subscript is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("open('x')", "unknown function 'open'"),
        ("a.b(1)", "unknown function 'a.b'"),
        ("ratio(a, b=1)", "keyword and starred"),
        ("ratio(*a)", "keyword and starred"),
        ("ratio(a)", r"ratio\(\) takes 2 argument\(s\), got 1"),
        ("sum()", r"sum\(\) takes at least 1 argument\(s\), got 0"),
        ("abs(a, a)", r"abs\(\) takes 1 argument\(s\), got 2"),
        ("ratio + 1", "function 'ratio' used as a value"),
        ("zz + 1", "unknown figure 'zz'"),
        ("'text'", "only numbers may appear"),
        ("True + a", "only numbers may appear"),
        ("1e200", "number too large"),
        ("a % 2", "operator Mod is not allowed"),
        ("not a", "only unary minus"),
        ("a < 2", "Compare is not allowed"),
        ("a +", "not a valid expression"),
    ],
)
def test_what_parse_refuses_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=message) as err:
        parse_expr(text, ["a"])
    assert "\n" not in str(err.value)


def test_overlong_or_non_text_expressions_are_refused() -> None:
    with pytest.raises(ExprError, match="at most 2,000 characters"):
        parse_expr("a+" * 1001 + "a", ["a"])
    with pytest.raises(ExprError, match="must be text"):
        parse_expr(42, ["a"])  # type: ignore[arg-type]


def test_every_function_has_an_arity_and_a_call_at_its_arity_parses() -> None:
    assert set(ARITY) == set(FUNCTIONS)
    for name, (lo, _hi) in ARITY.items():
        args = ", ".join(["a"] * lo)
        tree = parse_expr(f"{name}({args})", ["a"])
        assert expr_names(tree) == ["a"]  # function names are not figures


def test_expr_names_lists_each_figure_once() -> None:
    tree = parse_expr("ratio(b, a) + b * c - sum(a, c)", ["a", "b", "c"])
    names = expr_names(tree)
    assert sorted(names) == ["a", "b", "c"]


# each expression beside the same formula in plain floats
_PLAIN = {
    "a + b": lambda a, b, c: a + b,
    "b - a": lambda a, b, c: b - a,
    "a * c": lambda a, b, c: a * c,
    "b / a": lambda a, b, c: b / a,
    "a ** 2": lambda a, b, c: a**2,
    "-c": lambda a, b, c: -c,
    "ratio(b, a)": lambda a, b, c: b / a,
    "percent_drop(b, a)": lambda a, b, c: 1 - a / b,
    "sum(a, b, c)": lambda a, b, c: a + b + c,
    "product(a, b)": lambda a, b, c: a * b,
    "reciprocal(b)": lambda a, b, c: 1 / b,
    "abs(c)": lambda a, b, c: abs(c),
    "difference(a, c)": lambda a, b, c: a - c,
    "a * b / c - a": lambda a, b, c: a * b / c - a,
}


def test_interval_results_contain_the_value_at_every_corner() -> None:
    # whatever values within their printed ranges the figures had, the result lies in the interval
    env = {"a": _iv(1.95, 2.05), "b": _iv(4.5, 5.5), "c": _iv(-1.5, -0.5)}
    for text, plain in _PLAIN.items():
        out = eval_expr(parse_expr(text, env), env)
        assert out.lo <= out.mid <= out.hi, text
        assert out.mid == pytest.approx(plain(2.0, 5.0, -1.0)), text
        for a, b, c in itertools.product(*((iv.lo, iv.mid, iv.hi) for iv in env.values())):
            assert out.lo - 1e-12 <= plain(a, b, c) <= out.hi + 1e-12, (text, a, b, c)


def test_percent_functions_by_hand() -> None:
    env = {"old": Interval.exact(200.0), "new": Interval.exact(150.0)}
    assert eval_expr(parse_expr("percent_drop(old, new)", env), env).mid == pytest.approx(0.25)
    assert eval_expr(parse_expr("percent_change(old, new)", env), env).mid == pytest.approx(-0.25)
    assert eval_expr(parse_expr("percent_increase(new, old)", env), env).mid == pytest.approx(1 / 3)
    assert eval_expr(parse_expr("percent_of(new, old)", env), env).mid == pytest.approx(0.75)


def test_exact_mode_keeps_fractions() -> None:
    env = {"a": Interval.exact(Fraction(1, 3))}  # type: ignore[arg-type]
    out = eval_expr(parse_expr("a * 3 - 1", env), env, exact=True)
    assert out.mid == 0 and isinstance(out.mid, Fraction)
    # 0.1 is the decimal as written, not its binary float
    out = eval_expr(parse_expr("0.1 * 3", {}), {}, exact=True)
    assert out.mid == Fraction(3, 10)


def test_evaluation_failures() -> None:
    env = {"a": Interval.exact(1e300), "z": Interval.exact(0.0), "m": Interval.exact(-8.0)}
    with pytest.raises(ExprError, match="overflows"):
        eval_expr(parse_expr("a * a", env), env)
    with pytest.raises(ExprError, match="no real result"):
        eval_expr(parse_expr("m ** 0.5", env), env)
    with pytest.raises(ZeroDivisionError):  # the caller names the figures
        eval_expr(parse_expr("1 / z", env), env)


def test_a_divisor_that_may_be_zero_compares_the_printed_values_only() -> None:
    env = {"a": _iv(9.0, 11.0), "d": Interval(-0.5, 2.0, 4.5)}
    out = eval_expr(parse_expr("a / d", env), env)
    assert out == Interval.exact(5.0)


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("t + u", "s"),
        ("n / t", "B/s"),
        ("ratio(t, u)", "a number"),
        ("t * t", "s^2"),
        ("t ** 2", "s^2"),
        ("t ** -1", "1/s"),
        ("reciprocal(t)", "1/s"),
        ("k ** 2.5", "a number"),
        ("percent_drop(t, u)", "a number"),
        ("product(n, k)", "B"),
        ("sum(t, u, t)", "s"),
        ("abs(-t)", "s"),
        ("3", "a number"),
    ],
)
def test_dimensions_combine_as_units_do(text: str, unit: str) -> None:
    assert expr_dims(parse_expr(text, DIMS), DIMS)[1] == unit


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t + n", "cannot add s and GB"),
        ("difference(t, n)", "cannot subtract s and GB"),
        ("sum(t, n)", "cannot add s and GB"),
        ("percent_of(t, n)", "cannot compare s and GB"),
        ("k ** t", "exponent must be a plain number, not s"),
        ("t ** 2.5", "small whole constant power"),
        ("t ** 13", "small whole constant power"),
        ("t ** k", "small whole constant power"),
    ],
)
def test_clashing_dimensions_name_both_units(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=message):
        expr_dims(parse_expr(text, DIMS), DIMS)


def test_solve_scalar_finds_roots_of_monotone_functions() -> None:
    assert solve_scalar(lambda x: x * x, 9.0) == pytest.approx(3.0)
    assert solve_scalar(lambda x: 2 * x + 1, 1e6) == pytest.approx((1e6 - 1) / 2)
    # a divisor: f(x) = 100 / x = 4 -> x = 25
    x = solve_scalar(lambda x: 100.0 / x, 4.0)
    assert x is not None and 100.0 / x == pytest.approx(4.0)
    # no real solution: x^2 = -1
    assert solve_scalar(lambda x: x * x, -1.0) is None
    # a constant never reaches another value
    assert solve_scalar(lambda x: 5.0, 7.0) is None
