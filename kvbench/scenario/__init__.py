"""The run schema: what a scenario file may say, and how one is read (import path unchanged).

sections.py   shared sections: target, prompts, output, cache, telemetry
load.py       load kinds (sequential | concurrent | rate), each with max_in_flight
noise.py      background-traffic kinds (none | tcp | iperf3 | fio), with clients and placement
cluster.py    where noise clients and load workers run: local, or a Ray cluster
testtypes.py  one section per test type, discriminated on test.kind (+ the old-layout map)
model.py      Scenario: all of the above, checked together
loading.py    find, read (kvbench.configfile) and validate a file; write it back as YAML
"""

from kvbench.scenario.cluster import ClusterSection, parse_cluster_flag
from kvbench.scenario.load import ConcurrentLoad, Load, RateLoad, SequentialLoad
from kvbench.scenario.loading import (
    MAX_SCENARIO_BYTES,
    PACKAGE_SCENARIOS,
    load_scenario,
    parse_yaml_text,
    resolve_scenario_path,
    scenario_search_path,
    scenario_to_yaml,
    validate_scenario,
)
from kvbench.scenario.model import Scenario
from kvbench.scenario.noise import FioNoise, Iperf3Noise, Noise, NoNoise, TcpNoise
from kvbench.scenario.sections import (
    Cache,
    Engine,
    LengthRange,
    Output,
    Prompts,
    Strict,
    Target,
    Telemetry,
    Timeouts,
)
from kvbench.scenario.testtypes import (
    SECTIONS,
    BetweenPhases,
    Noisy,
    SectionBase,
    SessionsSection,
    TestSection,
    ThroughputSection,
    TtftSection,
)

__all__ = [
    "MAX_SCENARIO_BYTES",
    "PACKAGE_SCENARIOS",
    "SECTIONS",
    "BetweenPhases",
    "Cache",
    "ClusterSection",
    "ConcurrentLoad",
    "Engine",
    "FioNoise",
    "Iperf3Noise",
    "LengthRange",
    "Load",
    "NoNoise",
    "Noise",
    "Noisy",
    "Output",
    "Prompts",
    "RateLoad",
    "Scenario",
    "SectionBase",
    "SequentialLoad",
    "SessionsSection",
    "Strict",
    "Target",
    "TcpNoise",
    "Telemetry",
    "TestSection",
    "ThroughputSection",
    "Timeouts",
    "TtftSection",
    "load_scenario",
    "parse_cluster_flag",
    "parse_yaml_text",
    "resolve_scenario_path",
    "scenario_search_path",
    "scenario_to_yaml",
    "validate_scenario",
]
