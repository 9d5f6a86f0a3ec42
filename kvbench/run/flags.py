"""`kvbench run`'s general flags, mapped onto whichever test runs, or refused with one line.

The load and length flags mean one thing to a user (how hard, how many, how long) and a different
field in each test: a throughput run's `load`, a replay's `test.schedule`, a sessions run's
`test.active_users`. This module is the one table of flag -> field per test type (`MAPPING`, which
`--help` prints) and the code that applies it; a flag a test has no field for is refused with the
form that test takes. The spellings of vLLM bench / AIPerf are aliases of the same options
(`--request-rate` is `--rate`, `--max-concurrency` is `--concurrency`, `--num-prompts` is `--requests`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from kvbench.errors import UsageError


@dataclass(frozen=True)
class General:
    """The general flags the user set (None: not set)."""

    concurrency: int | None = None
    requests: int | None = None
    rate: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    lengths: list[int] | None = None
    prompt_count: int | None = None
    spelled: dict[str, str] = field(default_factory=dict)  # option -> the alias the user typed

    def name(self, flag: str) -> str:
        return self.spelled.get(flag, flag)


# flag -> how each test type reads it: a field path, or the refusal's pointer to the right form
MAPPING: dict[str, dict[str, str]] = {
    "--concurrency": {
        "ttft": "refused (one request at a time, cold then warm; N in flight: "
        "`kvbench run throughput --concurrency N`)",
        "throughput": "load.concurrency (closed loop); with --rate: load.max_concurrency",
        "sessions": "test.active_users",
        "replay": "test.schedule=concurrent, test.concurrency; with --rate: test.max_concurrency",
    },
    "--requests": {
        "ttft": "refused (each of --lengths once cold, then warm: --set test.warm_repeats=N)",
        "throughput": "load.requests (per phase)",
        "sessions": "refused (a phase is test.users x test.turns requests: --set test.users=N)",
        "replay": "test.trace.limit (the first N rows)",
    },
    "--rate": {
        "ttft": "refused (one request at a time; arrivals at a rate: `kvbench run throughput --rate R`)",
        "throughput": "load.kind=rate, load.rate (open loop, Poisson)",
        "sessions": "refused (users arrive, not requests: --set test.arrival_rate_per_s=R)",
        "replay": "test.schedule=rate, test.rate",
    },
    "--random-input-len": {
        "ttft": "prompts.lengths=N",
        "throughput": "prompts.lengths=N (every prompt)",
        "sessions": "refused (--set test.first_message_tokens=N, test.turn_tokens=N)",
        "replay": "refused (the trace's rows give the lengths)",
    },
    "--max-tokens": {
        "ttft": "output.max_tokens",
        "throughput": "output.max_tokens",
        "sessions": "output.max_tokens",
        "replay": "output.max_tokens, test.output_tokens=scenario (else each row's own)",
    },
    "--lengths": {
        "sessions": "refused (--set test.first_message_tokens=N, test.turn_tokens=N)",
        "replay": "refused (the trace's rows give the lengths)",
    },
    "--prompts": {
        "sessions": "refused (--set test.users=N)",
        "replay": "refused (the trace's rows are the prompts; --requests N replays the first N)",
    },
}


def mapping_help() -> str:
    """MAPPING as `kvbench run --help` shows it: one block per flag, one line per test."""
    lines = ["General flags set the field the test has for them, or are refused (with the form):", "", "\b"]
    for flag, per_test in MAPPING.items():
        if set(per_test) != set(MAPPERS):
            tests = " and ".join(per_test)
            lines.append(f"  {flag}: refused on {tests}")
            continue
        lines.append(f"  {flag} {'R' if flag == '--rate' else 'N'}")
        for test, where in per_test.items():
            text = re.sub(r" [(][^)]*[)]", "", where).replace(
                "; with --rate: ", "; with --rate:\n" + " " * 16
            )
            lines.append(f"    {test + ':':12}{text}")
    lines.append("  --max-concurrency, --num-prompts, --request-rate, --random-output-len:")
    lines.append("    the same as --concurrency, --requests, --rate, --max-tokens")
    lines.append("    (vLLM bench's spellings)")
    return "\n".join(lines) + "\n"


def _same_as(of: str) -> str:
    return f"The same as {of} (vLLM bench's spelling)."


_PER_TEST = "; the field it sets depends on the test (the table above)"
ConcurrencyOpt = Annotated[int | None, typer.Option(help="Requests in flight" + _PER_TEST + ".")]
RequestsOpt = Annotated[int | None, typer.Option(help="Requests per phase" + _PER_TEST + ".")]
RateOpt = Annotated[float | None, typer.Option(help="Arrivals per second, open loop" + _PER_TEST + ".")]
InputLenOpt = Annotated[
    int | None, typer.Option(help="Prompt length, tokens (vLLM bench's spelling)" + _PER_TEST + ".")
]
OutputLenOpt = Annotated[int | None, typer.Option(help="Output tokens per request" + _PER_TEST + ".")]
MaxConcurrencyOpt = Annotated[int | None, typer.Option(help=_same_as("--concurrency"))]
NumPromptsOpt = Annotated[int | None, typer.Option(help=_same_as("--requests"))]
RequestRateOpt = Annotated[float | None, typer.Option(help=_same_as("--rate"))]
RandomOutputLenOpt = Annotated[int | None, typer.Option(help=_same_as("--max-tokens"))]


def merge_alias(flag: str, value: Any, alias: str, alias_value: Any, spelled: dict[str, str]) -> Any:
    """One value from an option and its alias (`spelled` learns which the user typed); both given
    and different: one line."""
    if value is not None and alias_value is not None and value != alias_value:
        raise UsageError(f"{alias} {alias_value} and {flag} {value}: the same setting twice; give one")
    if value is None and alias_value is not None:
        spelled[flag] = alias
    return value if value is not None else alias_value


def refuse(flag: str, test: str, g: General | None = None) -> UsageError:
    why = MAPPING[flag][test].removeprefix("refused (").removesuffix(")")
    return UsageError(f"{g.name(flag) if g else flag}: does not apply to the {test} test: {why}")


def _switch_needs_requests(load_kind: str, g: General) -> None:
    if load_kind == "sequential" and g.requests is None:
        flag = g.name("--rate" if g.rate is not None else "--concurrency")
        raise UsageError(
            f"{flag}: this scenario's load is sequential (each prompt once); add --requests N (per phase)"
        )


def _throughput(g: General, data: dict[str, Any]) -> dict[str, Any]:
    load = data.get("load") if isinstance(data.get("load"), dict) else {}
    load_kind = str((load or {}).get("kind", "sequential"))
    out: dict[str, Any] = {}
    if g.rate is not None:
        _switch_needs_requests(load_kind, g)
        out.update({"load.kind": "rate", "load.rate": g.rate})
        if g.concurrency is not None:
            out["load.max_concurrency"] = g.concurrency
    elif g.concurrency is not None:
        if load_kind == "rate":
            out["load.max_concurrency"] = g.concurrency
        else:
            _switch_needs_requests(load_kind, g)
            out.update({"load.kind": "concurrent", "load.concurrency": g.concurrency})
    if g.requests is not None:
        if load_kind == "sequential" and "load.kind" not in out:  # one connection kept busy: the same
            out.update({"load.kind": "concurrent", "load.concurrency": 1})
        out["load.requests"] = g.requests
    return out | _prompt_lengths(g)


def _ttft(g: General, data: dict[str, Any]) -> dict[str, Any]:
    for flag, value in (("--concurrency", g.concurrency), ("--requests", g.requests), ("--rate", g.rate)):
        if value is not None:
            raise refuse(flag, "ttft", g)
    return _prompt_lengths(g)


def _sessions(g: General, data: dict[str, Any]) -> dict[str, Any]:
    refused = (("--requests", g.requests), ("--rate", g.rate), ("--random-input-len", g.input_len))
    for flag, value in (*refused, ("--lengths", g.lengths), ("--prompts", g.prompt_count)):
        if value is not None:
            raise refuse(flag, "sessions", g)
    return {} if g.concurrency is None else {"test.active_users": g.concurrency}


def _replay(g: General, data: dict[str, Any]) -> dict[str, Any]:
    for flag, value in (
        ("--random-input-len", g.input_len),
        ("--lengths", g.lengths),
        ("--prompts", g.prompt_count),
    ):
        if value is not None:
            raise refuse(flag, "replay", g)
    schedule = str(data["test"].get("schedule", "fixed"))
    out: dict[str, Any] = {}
    if g.rate is not None:
        out.update({"test.schedule": "rate", "test.rate": g.rate})
        if g.concurrency is not None:
            out["test.max_concurrency"] = g.concurrency
    elif g.concurrency is not None:
        if schedule == "rate":
            out["test.max_concurrency"] = g.concurrency
        else:  # a rate the file set means nothing to a closed loop
            out.update({"test.schedule": "concurrent", "test.concurrency": g.concurrency, "test.rate": None})
    if g.requests is not None:
        out["test.trace.limit"] = g.requests
    if g.output_len is not None:
        out["test.output_tokens"] = "scenario"
    return out


def _prompt_lengths(g: General) -> dict[str, Any]:
    if g.input_len is None:
        return {}
    if g.lengths is not None and g.lengths != [g.input_len]:
        raise UsageError(
            "--random-input-len: sets the prompt length that --lengths sets too; give one of them"
        )
    return {"prompts.lengths": [g.input_len]}


MAPPERS: dict[str, Callable[[General, dict[str, Any]], dict[str, Any]]] = {
    "ttft": _ttft,
    "throughput": _throughput,
    "sessions": _sessions,
    "replay": _replay,
}


def general_overrides(g: General, data: dict[str, Any], sets: dict[str, Any]) -> dict[str, Any]:
    """Dotted overrides for the general flags on the test `data` (the scenario's raw YAML) runs; a
    `--set test.kind=...` among `sets` decides the test. Refusals are one line, exit 2."""
    if g.rate is not None and not g.rate > 0:
        raise UsageError(f"{g.name('--rate')} {g.rate:g}: arrivals per second, above 0")
    test = data.get("test") if isinstance(data.get("test"), dict) else {}
    named = sets.get("test.kind") or (sets["test"] if isinstance(sets.get("test"), str) else None)
    kind = str(named or (test or {}).get("kind") or "")
    out: dict[str, Any] = {}
    if g.lengths is not None:
        out["prompts.lengths"] = g.lengths
    if g.prompt_count is not None:
        out["prompts.count"] = g.prompt_count
    if g.output_len is not None:
        out["output.max_tokens"] = g.output_len
    for flag, value in (
        ("--concurrency", g.concurrency),
        ("--requests", g.requests),
        ("--random-input-len", g.input_len),
        ("--max-tokens", g.output_len),
    ):
        if value is not None and value < 1:
            sets_what = re.sub(r" [(][^)]*[)]", "", MAPPING[flag].get(kind, "its field"))
            raise UsageError(
                f"{g.name(flag)} {value}: must be 1 or more (on {kind or 'this'} it sets {sets_what})"
            )
    return out | _mapped(g, kind, data, test or {})


def _mapped(g: General, kind: str, data: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mapper = MAPPERS.get(kind)
    if mapper is None:
        given = [
            n
            for n, v in (("--concurrency", g.concurrency), ("--requests", g.requests), ("--rate", g.rate))
            if v is not None
        ]
        if given:
            raise UsageError(
                f"{given[0]}: no mapping for the {kind or 'unnamed'} test; set its fields with --set"
            )
        return out | _prompt_lengths(g)
    return out | mapper(g, {**data, "test": test})
