"""`--set SECTION.kind=OTHER` switches a discriminated section to another kind: the fields the new
kind shares are kept, the others dropped, and a field it needs that nothing set is one line naming
the working forms. Messages carry no pydantic wording and no installed file's path."""

from __future__ import annotations

import pytest

from kvbench.configfile import Raw
from kvbench.errors import KvbenchError
from kvbench.scenario import PACKAGE_SCENARIOS, load_scenario

PYDANTIC = ("Unable to extract tag", "Input should be", "validation error", "type=", "Input tag")


def _load(name: str, **sets: str):
    return load_scenario(name, {k: Raw(v) for k, v in sets.items()})[0]


def _line(name: str, **sets: str) -> str:
    with pytest.raises(KvbenchError) as exc:
        _load(name, **sets)
    lines = exc.value.lines()
    assert len(lines) == 1, lines
    assert not any(word in lines[0] for word in PYDANTIC), lines[0]
    assert str(PACKAGE_SCENARIOS.resolve()) not in lines[0], lines[0]
    return lines[0]


def test_switching_concurrent_to_rate_keeps_what_it_shares() -> None:
    scn = _load("throughput", **{"load.kind": "rate", "load.rate": "5"})
    assert scn.load.kind == "rate" and scn.load.rate == 5
    assert scn.load.requests == 200  # the file's requests: a field both kinds have
    assert scn.load.max_concurrency == 256  # a rate load's own default, not the file's concurrency


def test_the_order_of_the_sets_does_not_matter() -> None:
    a = _load("throughput", **{"load.rate": "5", "load.kind": "rate"})
    b = _load("throughput", **{"load.kind": "rate", "load.rate": "5"})
    assert a == b


def test_switching_to_sequential_drops_every_other_field() -> None:
    scn = _load("throughput", **{"load.kind": "sequential"})
    assert scn.load.kind == "sequential" and scn.load.max_in_flight == 1


def test_a_required_field_nothing_set_names_both_working_forms() -> None:
    line = _line("throughput", **{"load.kind": "rate"})
    assert "load.kind=rate: also needs load.rate" in line
    assert "--set load.rate=..." in line and "--set 'load={kind: rate, rate: ...}'" in line


def test_a_new_section_of_a_kind_needs_all_its_fields() -> None:
    line = _line("ttft", **{"load.kind": "concurrent"})
    assert "load.concurrency" in line and "load.requests" in line


def test_an_untagged_section_names_its_kinds() -> None:
    line = _line("replay", **{"load.concurrency": "1"})
    assert "load: names no kind; add kind: one of" in line
    assert "concurrent" in line and "rate" in line and "sequential" in line


def test_an_unknown_kind_lists_the_known_ones() -> None:
    line = _line("throughput", **{"load.kind": "burst"})
    assert "load.kind" in line and "'sequential', 'concurrent' or 'rate'" in line


def test_a_whole_section_with_an_unknown_or_missing_tag() -> None:
    assert "load: kind 'rat' is not one of sequential, concurrent, rate" in _line(
        "throughput", load="{kind: rat, rate: 2}"
    )
    assert "load: names no kind" in _line("throughput", load="{rate: 2}")


def test_a_whole_section_reports_the_field_of_its_own_kind() -> None:
    assert _line("throughput", load="{kind: rate, rate: 2}").startswith("load.requests: required")


def test_a_shipped_scenario_is_named_not_its_installed_path() -> None:
    assert _line("replay", **{"test.schedule": "rate"}).startswith("scenario replay: ")


def test_the_test_kind_switches_too() -> None:
    # the throughput file's baseline/noisy knobs do not follow it into a ttft test
    scn = _load("throughput", **{"test.kind": "ttft", "load.kind": "sequential"})
    assert scn.test.kind == "ttft"
