"""The sweep's plan from its flags: `--over FIELD=V1,V2,...` (a grid of one or two fields, or
`FIELD=LO..HI` for a search) and `--slo NAME=MS`, each checked before any point runs.

Values stay text: each is read later as the type of the field it sets, by the same `--set`
machinery a run uses (kvbench.configfile), so a value of the wrong type is the same one line.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from kvbench.configfile import field_at, parse_set, read_value
from kvbench.errors import UsageError
from kvbench.redact import redact
from kvbench.scenario.slo import SLO_METRICS, slo_problem
from kvbench.scenario.testtypes import translate_key

MAX_FIELDS = 2
MAX_POINTS = 1000
LOAD_FIELDS = ("load.concurrency", "load.rate", "load.max_concurrency")


@dataclass(frozen=True)
class Axis:
    """One stepped field and its values (as typed)."""

    field: str
    values: tuple[str, ...]


def split_values(text: str) -> list[str]:
    """`a,b,[1,2],{x: 1}` -> ['a', 'b', '[1,2]', '{x: 1}']: commas inside brackets stay."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[{("
        depth -= ch in "]})"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [v for v in out if v]


def known_field(key: str) -> str:
    """The scenario field a key names (old layouts translated), or one line saying there is none."""
    from kvbench.scenario import Scenario

    if key == "working_set":  # the tier-cliff map's pseudo-field (kvbench.sweep.cliff)
        return key
    dotted = translate_key(key)
    if field_at(Scenario, dotted) is None:
        raise UsageError(f"--over {key}: no such scenario field (see `kvbench validate SCENARIO`)")
    return dotted


def parse_over(items: list[str]) -> list[Axis]:
    """One Axis per `--over FIELD=V1,V2,...`; at most two fields, none twice, no empty list."""
    if not items:
        raise UsageError("--over FIELD=V1,V2,... is required: which field the sweep steps")
    if len(items) > MAX_FIELDS:
        raise UsageError(f"--over: at most {MAX_FIELDS} fields make a grid ({len(items)} given)")
    axes: list[Axis] = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--over {item!r}: expected FIELD=V1,V2,..., e.g. --over load.concurrency=1,2,4")
        values = split_values(raw)
        if not values:
            raise UsageError(f"--over {key.strip()}: an empty list of values")
        dotted = known_field(key.strip())
        if any(a.field == dotted for a in axes):
            raise UsageError(f"--over {key.strip()}: the same field twice")
        if len(set(values)) != len(values):
            raise UsageError(f"--over {key.strip()}: a value appears twice ({raw})")
        axes.append(Axis(dotted, tuple(values)))
    total = 1
    for a in axes:
        total *= len(a.values)
    if total > MAX_POINTS:
        raise UsageError(f"--over: {total} points is more than {MAX_POINTS}")
    return axes


def grid(axes: list[Axis]) -> list[dict[str, str]]:
    """Every combination, the first field outermost, as field -> raw value."""
    return [
        dict(zip([a.field for a in axes], combo, strict=True))
        for combo in itertools.product(*[a.values for a in axes])
    ]


def point_name(index: int, assignment: dict[str, str], repeat: int = 0) -> str:
    """`3-load.concurrency=8` (and `-r1` for a repeat): the point's folder under points/. A value
    that carries a credential (`target.base_url=http://u:PW@host`) is named without it: folder
    names are printed, listed and archived like any record (kvbench.redact)."""
    parts = "-".join(f"{k}={redact(v)}" for k, v in assignment.items())
    slug = re.sub(r"[^A-Za-z0-9._=-]", "_", parts)[:120]
    return f"{index}-{slug}" + (f"-r{repeat}" if repeat else "")


def parse_range(item: str) -> tuple[str, float, float, bool]:
    """`--over load.concurrency=1..32` for a search: (field, lo, hi, integer field?)."""
    from kvbench.scenario import Scenario

    key, sep, raw = item.partition("=")
    lo_text, dots, hi_text = raw.partition("..")
    if not sep or not dots:
        raise UsageError(f"--over {item!r}: a search needs FIELD=LO..HI, e.g. load.concurrency=1..32")
    dotted = known_field(key.strip())
    if dotted not in LOAD_FIELDS:
        raise UsageError(f"--search goodput: steps a load field ({', '.join(LOAD_FIELDS)}), not {dotted}")
    ann = field_at(Scenario, dotted)
    integer = dotted != "load.rate"
    lo_v, hi_v = (read_value(ann, t.strip(), dotted) for t in (lo_text, hi_text))
    if not isinstance(lo_v, int | float) or not isinstance(hi_v, int | float) or not lo_v < hi_v:
        raise UsageError(f"--over {item!r}: LO..HI must be two numbers, LO below HI")
    return dotted, float(lo_v), float(hi_v), integer


def parse_slo(items: list[str]) -> dict[str, float]:
    """`--slo ttft_p99_ms=500` pairs, each a known SLO and a positive number of milliseconds."""
    out: dict[str, float] = {}
    for key, raw in parse_set(items, "--slo").items():
        if key not in SLO_METRICS:
            raise UsageError(f"--slo {key}: no such SLO (known: {', '.join(SLO_METRICS)})")
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"--slo {key}={raw}: expected milliseconds, a number") from None
        if not value > 0:
            raise UsageError(f"--slo {key}={raw}: must be above 0 ms")
        out[key] = value
    return out


def check_slo_produced(slo: dict[str, float], scn: Any) -> None:
    """An SLO on a metric this test cannot produce is bad input, not an empty column later."""
    problem = slo_problem(slo, scn.output.max_tokens, "--slo")
    if problem:
        raise UsageError(problem)


def scenario_slo(scenario: str, sets: dict[str, str]) -> dict[str, float]:
    """The scenario's own `slo:` bounds (with the common --set overrides), used when no --slo is
    given. A scenario that does not load here says so again, as one line, when its points are
    checked."""
    from kvbench.configfile import Raw
    from kvbench.errors import KvbenchError
    from kvbench.scenario import load_scenario

    try:
        scn, _ = load_scenario(scenario, {k: Raw(v) for k, v in sets.items()})
    except KvbenchError:
        return {}
    return scn.slo.bounds() if scn.slo is not None else {}
