"""Moved to `kvbench.audit` (quantities, units, expr); this re-export keeps old imports working
for one release."""

from kvbench.audit.expr import ExprError, eval_expr, expr_names, parse_expr
from kvbench.audit.quantities import Interval, fmt_num
from kvbench.audit.units import Unit, convert, parse_unit, sibling_units

__all__ = [
    "ExprError",
    "Interval",
    "Unit",
    "convert",
    "eval_expr",
    "expr_names",
    "fmt_num",
    "parse_expr",
    "parse_unit",
    "sibling_units",
]
