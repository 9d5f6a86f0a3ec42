"""What a test section's cross-section rules read of the whole scenario, as a Protocol.

A test section (testtypes) checks itself against the scenario it sits in (`check(scn)`), and the
scenario (model) holds the test section: typing `check` with the Scenario class itself made the
two modules import each other. The section needs only the shared sections, which live below both,
so it names them through this Protocol and the Scenario satisfies it structurally.
"""

from __future__ import annotations

from typing import Protocol

from kvbench.scenario.cluster import ClusterSection
from kvbench.scenario.load import ConcurrentLoad, RateLoad, SequentialLoad
from kvbench.scenario.sections import Cache, Output, Prompts, Target


class ScenarioView(Protocol):
    """The shared sections of a scenario, read-only."""

    @property
    def target(self) -> Target: ...

    @property
    def prompts(self) -> Prompts: ...

    @property
    def load(self) -> SequentialLoad | ConcurrentLoad | RateLoad: ...

    @property
    def output(self) -> Output: ...

    @property
    def cache(self) -> Cache: ...

    @property
    def cluster(self) -> ClusterSection: ...
