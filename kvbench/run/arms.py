"""Offload arms as data the runner loops over: offload | no-offload | no-reuse.

An arm is a label and the target overrides that make it: `offload` is the scenario as given;
`no-offload` keeps the engine's GPU prefix cache and turns off only its offload tiers (the engine
adapter's `offload_off_overrides()`: on the embedded mock a switch of its tiers, on a real server a
restart, so that arm needs the URL of the same server started as `offload_off_how` says);
`no-reuse` salts every prompt on its own, so nothing can hit. Each arm starts from a verified cold
start (kvbench.run.preflight.cold); the order is ABBA (offload, no-offload, no-offload, offload, ...)
where the trace allows repeats, so drift in the machine falls on both arms alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvbench.errors import UsageError

if TYPE_CHECKING:
    from kvbench.engines.adapters import EngineAdapter

ARMS = ("offload", "no-offload", "no-reuse")
NO_REUSE = {"prompts.salt": "per_request"}  # every request its own salt: no prefix can match


@dataclass(frozen=True)
class Arm:
    """One arm: its name (also its phases' label) and what it sets on top of the scenario."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    can_hit: bool = True  # no-reuse cannot: its phases are never labelled "cached"


def parse_arms(text: str) -> list[str]:
    """`--arms offload,no-offload[,no-reuse]` as a list; one line naming the bad part."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if len(names) < 2:
        raise UsageError(f"--arms {text}: give at least two of {', '.join(ARMS)}, comma-separated")
    for name in names:
        if name not in ARMS:
            raise UsageError(f"--arms: unknown arm {name!r} (known: {', '.join(ARMS)})")
    if len(set(names)) != len(names):
        raise UsageError(f"--arms {text}: an arm is named twice")
    return names


def abba_order(names: list[str], repeats: int) -> list[str]:
    """The arms' run order: A B B A A B ... for `repeats` rounds (a round is every arm once, reversed
    every other round); one round (A B) where the trace allows only one pass per arm."""
    if repeats < 1:
        raise UsageError(f"--arms: repeats must be >= 1, got {repeats}")
    order: list[str] = []
    for i in range(repeats):
        order.extend(names if i % 2 == 0 else list(reversed(names)))
    return order


def build_arm(
    name: str,
    adapter: EngineAdapter,
    embedded_mock: bool,
    mock_overrides: dict[str, Any],
    baseline_url: str | None = None,
) -> Arm:
    """The arm `name` against this target. A no-offload arm on a real server needs a restart: it is
    refused with one line unless `baseline_url` (that server, offload off) is given."""
    if name == "offload":
        return Arm(name)
    if name == "no-reuse":
        return Arm(name, dict(NO_REUSE), can_hit=False)
    if baseline_url is not None:
        return Arm(name, {"target.base_url": baseline_url})
    switch = adapter.offload_off_overrides() if embedded_mock else None
    if switch is None:
        raise UsageError(
            f"--arms no-offload: {adapter.name} needs a restart for it ({adapter.offload_off_how}); "
            "give --baseline-url URL of that server"
        )
    return Arm(name, {"target.mock_overrides": {**mock_overrides, **switch}})


def phase_label(arm: Arm) -> str:
    """The label an arm's measured phases carry: the arm's own name, so a compare or a report never
    calls a phase that could not hit "cached"."""
    return arm.name
