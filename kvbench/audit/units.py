"""Units as checked dimensions: a small, closed table rather than pint.

Why not pint: a claims file counts things pint does not know (tokens, requests, prompts,
GPUs) and must keep each of them a dimension of its own (tokens/s is not requests/s);
pint would accept thousands of words a benchmark paper never means (a seconds value
"claimed in furlongs" would be a length, not an error), and the audit needs the sibling
units a careless writer confuses (GB/GiB, KB/KiB, s/ms, GB/Gbit), which pint does not model.
The table below is the whole vocabulary (`kvbench audit --units` prints it); an unknown word
is an error that suggests the nearest known one, and a file may declare extra counted things
in its top-level `units:` list.

A `Unit` is dimension exponents plus the factor to base units (s, B, one of each counted
thing), as a float and as an exact Fraction (for verdicts at rounding edges). Prefixes: SI
(k K M G T P) and binary (Ki Mi Gi Ti Pi) on B, SI on bit and on counted things ("Mtokens").
"x", "%", "1" and "" are dimensionless (% = 0.01); "1" is the unit of a plain number.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

Dims = tuple[tuple[str, int], ...]

_PREFIX = {"": Fraction(1), "k": Fraction(10**3), "K": Fraction(10**3), "M": Fraction(10**6)}
_PREFIX |= {"G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15)}
_BINARY = {"Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40)}
_BINARY["Pi"] = Fraction(2**50)
_TIME = {"ns": Fraction(1, 10**9), "us": Fraction(1, 10**6), "µs": Fraction(1, 10**6)}
_TIME |= {"ms": Fraction(1, 10**3), "s": Fraction(1), "min": Fraction(60), "h": Fraction(3600)}
_TIME_WORDS = {"sec": "s", "second": "s", "seconds": "s", "minute": "min", "minutes": "min"}
_TIME_WORDS |= {"hour": "h", "hours": "h"}
_BYTE_WORDS = {"byte": "B", "bytes": "B", "bits": "bit"}
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
    # plain counted words of benchmark papers, so older files need no `units:` for them
    "sessions": ("session",),
    "batches": ("batch",),
    "queries": ("query",),
    "turns": ("turn",),
    "conversations": ("conversation",),
    "iterations": ("iteration", "iter"),
    "samples": ("sample",),
    "documents": ("document", "doc", "docs"),
    "experts": ("expert",),
    "replicas": ("replica",),
    "workers": ("worker",),
    "instances": ("instance",),
    "pages": ("page",),
    "chunks": ("chunk",),
    "calls": ("call",),
    "jobs": ("job",),
    "tasks": ("task",),
    "runs": ("run",),
    "trials": ("trial",),
    "images": ("image",),
}
_DIMENSIONLESS = {"": Fraction(1), "x": Fraction(1), "%": Fraction(1, 100), "1": Fraction(1)}
_DIMENSIONLESS["percent"] = _DIMENSIONLESS["%"]
# "count" is how many papers label a plain number of things: the same as "1"
_DIMENSIONLESS["count"] = _DIMENSIONLESS["counts"] = _DIMENSIONLESS["1"]
#: words a writer uses for a plain number; the fix is the unit "1"
_PLAIN_WORDS = {"number", "num", "#", "n", "items", "times", "ratio", "fraction"}


class UnitError(ValueError):
    """A unit text that uses a word outside the table; `fix` is a suggested replacement word."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


def _measure_words() -> set[str]:
    words = set(_TIME) | set(_TIME_WORDS) | set(_BYTE_WORDS)
    return words | {p + "B" for p in (*_PREFIX, *_BINARY)} | {p + "bit" for p in _PREFIX}


def builtin_words() -> list[str]:
    """The words suggested for an unknown one (the rate words Gbps, Mbps ... parse but are not offered:
    "Gb" is a bit count, not a rate)."""
    words = list(_DIMENSIONLESS) + list(_TIME) + list(_TIME_WORDS) + list(_BYTE_WORDS)
    words += [p + "B" for p in (*_PREFIX, *_BINARY)] + [p + "bit" for p in _PREFIX]
    for plural, forms in COUNTS.items():
        words += [plural, *forms]
    return [w for w in words if w]


def known_units() -> str:
    """The vocabulary, printed once by `kvbench audit --units`."""
    counts = ", ".join(f"{p} ({'/'.join(f)})" for p, f in COUNTS.items())
    return "\n".join(
        [
            "time:          ns us ms s min h (also sec, seconds, minutes, hours)",
            "bytes:         B kB KB MB GB TB PB, KiB MiB GiB TiB PiB (binary), byte(s)",
            "bits:          bit kbit Mbit Gbit Tbit (1 bit = 1/8 B); Mbps Gbps = Mbit/s Gbit/s",
            f"counted:       {counts}",
            "               SI prefixes on counts: ktokens, Mtokens; a file's `units: [word]` adds more",
            'dimensionless: "1" (a plain number), x (a ratio), % or percent (= 0.01), or no unit',
            "combinations:  * and / (or ' per '): req/s, GB/s, B/token, s/request, tokens*s",
        ]
    )


_MEASURES = _measure_words()


def count_word(name: str, extra: frozenset[str]) -> str | None:
    if name in COUNTS or name in extra:
        return name
    for plural, forms in COUNTS.items():
        if name in forms:
            return plural
    return None


def singular(word: str) -> str:
    """'requests' -> 'request' (the form a unit's denominator reads best in)."""
    forms = COUNTS.get(word)
    return forms[0] if forms else word


def _unknown(name: str, extra: frozenset[str]) -> UnitError:
    if name.lower() in _PLAIN_WORDS:
        return UnitError(f"unknown unit '{name}': a plain number has the unit \"1\"", '"1"')
    # a long word must be close: with ~100 counted words, "furlongs" is 0.6 from "turns"
    cutoff = 0.6 if len(name) <= 4 else 0.7
    close = difflib.get_close_matches(name, _same_kind(name, [*builtin_words(), *extra]), n=1, cutoff=cutoff)
    if close:
        return UnitError(f"unknown unit '{name}': did you mean '{close[0]}'?", close[0])
    return UnitError(f"unknown unit '{name}': declare it under `units:` or see `kvbench audit --units`")


def _same_kind(name: str, words: list[str]) -> list[str]:
    """The words a hint may offer for `name`: a longer word is a counted thing unless it begins
    like a time or byte word ("sessions" is not a misspelt "seconds"; "secnds" is)."""
    if len(name) <= 4:
        return words
    counted = {w for p, forms in COUNTS.items() for w in (p, *forms)}
    return [w for w in words if w in counted or w not in _MEASURES or w[:3].lower() == name[:3].lower()]


def _atom(name: str, extra: frozenset[str]) -> tuple[dict[str, int], Fraction]:
    name = name.strip()
    name = _TIME_WORDS.get(name, _BYTE_WORDS.get(name, name))
    if name in _DIMENSIONLESS:
        return {}, _DIMENSIONLESS[name]
    if name in _TIME:
        return {"time": 1}, _TIME[name]
    if name.endswith("B") and (name[:-1] in _PREFIX or name[:-1] in _BINARY):
        p = name[:-1]
        return {"bytes": 1}, _BINARY.get(p, _PREFIX.get(p, Fraction(1)))
    if name.endswith("bit") and name[:-3] in _PREFIX:
        return {"bytes": 1}, _PREFIX[name[:-3]] / 8
    if name.endswith("bps") and name[:-3] in _PREFIX:  # "Gbps", as network papers write bit/s
        return {"bytes": 1, "time": -1}, _PREFIX[name[:-3]] / 8
    word = count_word(name, extra)
    if word is not None:
        return {word: 1}, Fraction(1)
    for p, k in _PREFIX.items():  # "Mtokens", "ktokens": an SI prefix on a counted thing
        if p and name.startswith(p):
            word = count_word(name[len(p) :], extra)
            if word is not None:
                return {word: 1}, k
    raise _unknown(name, extra)


@dataclass(frozen=True)
class Unit:
    """A parsed unit: dimension exponents and the factor to base units (s, B, counts)."""

    text: str
    dims: Dims
    factor: float
    exact: Fraction = Fraction(1)

    @property
    def dimensionless(self) -> bool:
        return not self.dims

    @property
    def is_percent(self) -> bool:
        return self.text.strip() == "%"

    @property
    def is_ratio(self) -> bool:
        return self.text.strip() in {"x", "", "1"}


def split_unit(text: str) -> list[tuple[int, str]]:
    """(sign, atom) pairs of a unit text: 'GB/s' -> [(1, 'GB'), (-1, 's')]."""
    out: list[tuple[int, str]] = []
    parts = text.replace(" per ", "/").split("/")
    for i, part in enumerate(parts):
        for atom in part.split("*"):
            if not atom.strip() and (i > 0 or len(parts) > 1):
                raise UnitError(f"bad unit {text!r}: an empty part around / or *")
            out.append((1 if i == 0 else -1, atom.strip()))
    return out


def parse_unit(text: str, extra: Iterable[str] = ()) -> Unit:
    """Parse "req/s", "GB/s", "B/token", "tokens/request", "GiB", "%", "x" (UnitError if unknown)."""
    if not isinstance(text, str):
        raise UnitError(f"a unit must be text, not {text!r}")
    more = frozenset(extra)
    dims: dict[str, int] = {}
    factor = Fraction(1)
    for sign, atom in split_unit(text):
        d, f = _atom(atom, more)
        for k, v in d.items():
            dims[k] = dims.get(k, 0) + sign * v
        factor = factor * f if sign > 0 else factor / f
    return Unit(text, tuple(sorted((k, v) for k, v in dims.items() if v)), float(factor), factor)


def dims_text(dims: Dims) -> str:
    """A readable unit for dimensions: 'B/s', 'requests/s', 's/request', 'a number'."""
    base = {"time": "s", "bytes": "B"}

    def part(items: list[tuple[str, int]], den: bool) -> str:
        return "*".join(
            base.get(k, singular(k) if den else k) + (f"^{v}" if v != 1 else "") for k, v in items
        )

    num = [(k, v) for k, v in dims if v > 0]
    den = [(k, -v) for k, v in dims if v < 0]
    if not num and not den:
        return "a number"
    return (part(num, False) or "1") + (f"/{part(den, True)}" if den else "")


def multiply_dims(a: Dims, b: Dims, power: int = 1) -> Dims:
    dims = dict(a)
    for k, v in b:
        dims[k] = dims.get(k, 0) + power * v
    return tuple(sorted((k, v) for k, v in dims.items() if v))


def suggest_unit(want: Unit, got: Dims) -> str:
    """A unit of dimension `got` written like `want` where it can be: ms, per request -> ms/request."""
    extra = multiply_dims(got, want.dims, -1)
    keys = {k for k, _ in want.dims}
    if not want.dims or want.is_percent or any(k in keys for k, _ in extra):
        return dims_text(got) if got else '"1"'
    base = {"time": "s", "bytes": "B"}
    num = [base.get(k, k) + (f"^{v}" if v != 1 else "") for k, v in extra if v > 0]
    den = [base.get(k, singular(k)) + (f"^{-v}" if v != -1 else "") for k, v in extra if v < 0]
    text = want.text.strip()
    if num:
        text = "*".join([text.split("/")[0], *num]) + text[len(text.split("/")[0]) :]
    return text + "".join(f"/{d}" for d in den)


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


_STEPS = ["", "k", "M", "G", "T", "P"]
_TIME_STEPS = ["ns", "us", "ms", "s"]


def _atom_variants(atom: str, extra: frozenset[str]) -> list[tuple[str, str]]:
    """(replacement, slip) for one atom: one SI step up or down ('prefix'), bytes <-> bits ('bits')."""
    out: list[tuple[str, str]] = []
    name = _TIME_WORDS.get(atom, _BYTE_WORDS.get(atom, atom))

    def steps(p: str, tail: str) -> None:
        p = "k" if p == "K" else p
        if p in _STEPS:
            i = _STEPS.index(p)
            out.extend((q + tail, "prefix") for q in _STEPS[max(i - 1, 0) : i + 2] if q != p)

    if name in _TIME_STEPS:
        i = _TIME_STEPS.index(name)
        out += [(t, "prefix") for t in _TIME_STEPS[max(i - 1, 0) : i + 2] if t != name]
    elif name.endswith("B") and name[:-1] in _PREFIX:
        steps(name[:-1], "B")
        out.append((("k" if name[0] == "K" else name[:-1]) + "bit", "bits"))
    elif name.endswith("bit") and name[:-3] in _PREFIX:
        steps(name[:-3], "bit")
        out.append((name[:-3] + "B", "bits"))
    elif count_word(name, extra) is not None:
        steps("", name)
    else:
        for p in _STEPS[1:]:
            if name.startswith(p) and count_word(name[len(p) :], extra) is not None:
                steps(p, name[len(p) :])
    return out


def unit_variants(unit: Unit, extra: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Units one slip away from `unit`, atom by atom: ('ms/request', 'prefix') for s/request,
    ('Gbit/s', 'bits') for GB/s, ('kJ', 'prefix') for a declared J; numerator atoms only."""
    more = frozenset(extra)
    try:
        atoms = split_unit(unit.text)
    except UnitError:
        return []
    out: list[tuple[str, str]] = []
    for i, (sign, atom) in enumerate(atoms):
        if sign < 0:
            continue  # "per krequest" or "GB/ms" is not how a slip reads: the numerator slips
        for alt, slip in _atom_variants(atom, more):
            parts = [(sg, alt if j == i else a) for j, (sg, a) in enumerate(atoms)]
            num = "*".join(a for sg, a in parts if sg > 0) or "1"
            text = num + "".join(f"/{a}" for sg, a in parts if sg < 0)
            if (text, slip) not in out and text != unit.text:
                out.append((text, slip))
    return out
