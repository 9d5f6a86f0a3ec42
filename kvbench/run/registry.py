"""Test types: a test name -> its scenario section and its plan (the function that runs its phases).

The runner dispatches through TEST_TYPES and nothing else knows the list. To add a test type:
a section model in kvbench/scenario/testtypes.py (registered in SECTIONS), a plan module here in
kvbench/run/, and one entry below; tests/unit/test_run_registry.py checks the two registries agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvbench.scenario import SECTIONS, Scenario, SectionBase, SessionsSection, ThroughputSection, TtftSection
from kvbench.scenario.testtypes import ReplaySection

if TYPE_CHECKING:
    from kvbench.engines.adapters import EngineAdapter
    from kvbench.load.prompts import Prompt
    from kvbench.run.context import Run

Plan = Callable[["Run", "list[Prompt]"], Awaitable[None]]


def _no_extra_body(scn: Scenario, adapter: EngineAdapter) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class TestType:
    """A registered test type."""

    __test__ = False  # not a pytest class

    name: str
    section: type[SectionBase]
    plan: Plan
    # fields every request of this test adds to its body, in the engine's terms (slot pinning, ...)
    extra_body: Callable[[Scenario, EngineAdapter], dict[str, Any]] = field(default=_no_extra_body)


def _registry() -> dict[str, TestType]:
    from kvbench.run.replay.phases import run_replay
    from kvbench.run.sessions.phases import run_sessions
    from kvbench.run.throughput import run_throughput
    from kvbench.run.ttft import pin_slot, run_ttft

    return {
        "ttft": TestType("ttft", TtftSection, run_ttft, pin_slot),
        "throughput": TestType("throughput", ThroughputSection, run_throughput),
        "sessions": TestType("sessions", SessionsSection, run_sessions),
        "replay": TestType("replay", ReplaySection, run_replay),
    }


TEST_TYPES: dict[str, TestType] = _registry()


def type_of_test(scn: Scenario) -> TestType:
    """The registered test type a scenario names (validation guarantees there is one)."""
    return TEST_TYPES[scn.test_name]


assert set(TEST_TYPES) == set(SECTIONS), "scenario sections and run plans must list the same test types"
