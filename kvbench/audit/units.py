"""Units as checked dimensions: a small, closed table rather than pint.

Why not pint: a claims file counts things pint does not know (tokens, requests, prompts,
GPUs) and must keep each of them a dimension of its own (tokens/s is not requests/s);
pint would accept thousands of words a benchmark paper never means (a seconds value
"claimed in furlongs" would be a length, not an error), and the audit needs the sibling
units a careless writer confuses (GB/GiB, KB/KiB, s/ms), which pint does not model.
The table below is the whole vocabulary; an unknown word is an error that lists it, and a
file may declare extra counted things in its top-level `units:` list.

A `Unit` is dimension exponents plus the factor to base units (s, B, one of each counted
thing). Prefixes: SI (k K M G T P) and binary (Ki Mi Gi Ti Pi) on B, SI on bit and on
counted things ("Mtokens"). "x", "%", "1" and "" are dimensionless (% = 0.01).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Dims = tuple[tuple[str, int], ...]

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_TIME_WORDS = {"sec": "s", "second": "s", "seconds": "s", "minute": "min", "minutes": "min"}
_TIME_WORDS |= {"hour": "h", "hours": "h"}
_BYTE_WORDS = {"byte": "B", "bytes": "B"}
#: counted things, each its own dimension; singular and short forms map to the plural
COUNTS: dict[str, tuple[str, ...]] = {
    "tokens": ("token", "tok"),
    "requests": ("request", "req"),
    "prompts": ("prompt",),
    "connections": ("connection",),
    "clients": ("client",),
    "GPUs": ("GPU", "gpus", "gpu"),
    "nodes": ("node",),
    "servers": ("server",),
    "layers": ("layer",),
    "sequences": ("sequence", "seq"),
    "users": ("user",),
    "blocks": ("block",),
    "steps": ("step",),
}
_DIMENSIONLESS = {"": 1.0, "x": 1.0, "%": 0.01, "1": 1.0}


class UnitError(ValueError):
    """A unit text that uses a word outside the table."""


def known_units() -> str:
    """The vocabulary, for error messages."""
    return (
        "time s ms us ns min h; bytes B kB KB MB GB TB KiB MiB GiB TiB (and bit, Mbit, Gbit); "
        f"counts {' '.join(COUNTS)}; x % (and combinations such as req/s, GB/s, B/token)"
    )


def _count_word(name: str, extra: frozenset[str]) -> str | None:
    if name in COUNTS or name in extra:
        return name
    for plural, forms in COUNTS.items():
        if name in forms:
            return plural
    return None


def _atom(name: str, extra: frozenset[str]) -> tuple[dict[str, int], float]:
    name = name.strip()
    name = _TIME_WORDS.get(name, _BYTE_WORDS.get(name, name))
    if name in _DIMENSIONLESS:
        return {}, _DIMENSIONLESS[name]
    if name in _TIME:
        return {"time": 1}, _TIME[name]
    if name.endswith("B") and (name[:-1] in _PREFIX or name[:-1] in _BINARY):
        p = name[:-1]
        return {"bytes": 1}, _BINARY.get(p, _PREFIX.get(p, 1.0))
    if name.endswith("bit") and name[:-3] in _PREFIX:
        return {"bytes": 1}, _PREFIX[name[:-3]] / 8
    word = _count_word(name, extra)
    if word is not None:
        return {word: 1}, 1.0
    for p, k in _PREFIX.items():  # "Mtokens", "ktokens": an SI prefix on a counted thing
        if p and name.startswith(p):
            word = _count_word(name[len(p) :], extra)
            if word is not None:
                return {word: 1}, k
    raise UnitError(f"unknown unit '{name}' (known: {known_units()})")


@dataclass(frozen=True)
class Unit:
    """A parsed unit: dimension exponents and the factor to base units (s, B, counts)."""

    text: str
    dims: Dims
    factor: float

    @property
    def dimensionless(self) -> bool:
        return not self.dims

    @property
    def is_percent(self) -> bool:
        return self.text.strip() == "%"

    @property
    def is_ratio(self) -> bool:
        return self.text.strip() in {"x", "", "1"}


def parse_unit(text: str, extra: Iterable[str] = ()) -> Unit:
    """Parse "req/s", "GB/s", "B/token", "tokens/request", "GiB", "%", "x" (UnitError if unknown)."""
    if not isinstance(text, str):
        raise UnitError(f"a unit must be text, not {text!r}")
    more = frozenset(extra)
    dims: dict[str, int] = {}
    factor = 1.0
    parts = text.replace(" per ", "/").split("/")
    for i, part in enumerate(parts):
        sign = 1 if i == 0 else -1
        for atom in part.split("*"):
            if not atom.strip() and (i > 0 or len(parts) > 1):
                raise UnitError(f"bad unit {text!r}")
            d, f = _atom(atom, more)
            for k, v in d.items():
                dims[k] = dims.get(k, 0) + sign * v
            factor = factor * f if sign > 0 else factor / f
    return Unit(text, tuple(sorted((k, v) for k, v in dims.items() if v)), factor)


def dims_text(dims: Dims) -> str:
    """A readable unit for dimensions: 'B/s', 'requests/s', 'a number'."""
    base = {"time": "s", "bytes": "B"}

    def part(items: list[tuple[str, int]]) -> str:
        return "*".join(base.get(k, k) + (f"^{v}" if v != 1 else "") for k, v in items)

    num = [(k, v) for k, v in dims if v > 0]
    den = [(k, -v) for k, v in dims if v < 0]
    if not num and not den:
        return "a number"
    return (part(num) or "1") + (f"/{part(den)}" if den else "")


def multiply_dims(a: Dims, b: Dims, power: int = 1) -> Dims:
    dims = dict(a)
    for k, v in b:
        dims[k] = dims.get(k, 0) + power * v
    return tuple(sorted((k, v) for k, v in dims.items() if v))


def sibling_units(unit: Unit) -> list[str]:
    """Units a careless writer might confuse with `unit`: GB vs GiB, KB vs KiB, s vs ms."""
    text = unit.text.strip()
    out: list[str] = []
    swaps = [("GiB", "GB"), ("MiB", "MB"), ("TiB", "TB"), ("KiB", "kB"), ("GB", "GiB"), ("MB", "MiB")]
    swaps += [("TB", "TiB"), ("kB", "KiB"), ("KB", "KiB"), ("KiB", "KB")]
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
        raise UnitError(f"cannot convert {src.text} to {dst.text}")
    return value * src.factor / dst.factor
