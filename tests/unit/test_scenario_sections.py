"""Per-test scenario sections: discriminated on test.kind, the old layout named, the flags derived."""

from __future__ import annotations

import inspect

import pytest

from kvbench.configfile import Raw, flag_keys
from kvbench.errors import ScenarioError
from kvbench.scenario import SECTIONS, Scenario, ThroughputSection, TtftSection, load_scenario
from kvbench.scenario.testtypes import MOVED, translate_key


def test_shorthand_and_full_form_are_the_same() -> None:
    a = Scenario.model_validate({"name": "x", "test": "ttft", "prompts": {"lengths": [10]}})
    b = Scenario.model_validate({"name": "x", "test": {"kind": "ttft"}, "prompts": {"lengths": [10]}})
    assert a == b and isinstance(a.test, TtftSection) and a.test_name == "ttft"


def test_ttft_knobs_live_in_the_ttft_section() -> None:
    scn, _ = load_scenario("ttft", {"test.warm_repeats": 3, "test.eviction": Raw("filler")})
    assert isinstance(scn.test, TtftSection)
    assert (scn.test.warm_repeats, scn.test.eviction) == (3, "filler")
    assert "warm_repeats" not in type(scn.cache).model_fields


@pytest.mark.parametrize(
    ("old", "value", "check"),
    [
        ("cache.warm_repeats", 3, lambda s: s.test.warm_repeats == 3),
        ("noisy.enabled", True, lambda s: s.test.noisy.enabled),
        ("baseline", True, lambda s: s.test.baseline),
        ("between_phases.command", "@restart-mock", lambda s: s.test.between_phases.command),
    ],
)
def test_old_set_keys_still_work(old: str, value: object, check) -> None:
    name = "ttft" if old.startswith("cache.") else "throughput"
    scn, _ = load_scenario(name, {old: value})
    assert check(scn)


def test_translate_key() -> None:
    assert translate_key("noisy.cache_start") == "test.noisy.cache_start"
    assert translate_key("cache.verify") == "cache.verify"
    assert translate_key("baseline_x") == "baseline_x"


def test_old_layout_file_names_every_moved_field(tmp_path) -> None:
    p = tmp_path / "old.yaml"
    p.write_text(
        "name: x\ntest: throughput\nprompts: {lengths: [10]}\nbaseline: true\nnoisy: {enabled: true}\n"
    )
    with pytest.raises(ScenarioError) as exc:
        load_scenario(str(p))
    assert [line.split(":")[0] for line in exc.value.problems] == ["baseline", "noisy"]
    assert all("moved to test." in line for line in exc.value.problems)


def test_moved_targets_exist() -> None:
    for new, test in MOVED.values():
        assert new.split(".")[1] in SECTIONS[test].model_fields


def test_a_knob_of_the_other_test_says_which_test() -> None:
    with pytest.raises(ScenarioError, match=r"test.baseline: applies to the throughput test, not ttft"):
        load_scenario("ttft", {"baseline": True})


def test_section_properties() -> None:
    t = ThroughputSection.model_validate({"noisy": {"enabled": True}, "between_phases": {"command": "x"}})
    assert t.noisy_phases and t.restarts_server
    assert not TtftSection().noisy_phases and not TtftSection().restarts_server


def test_every_flag_key_is_a_run_option() -> None:
    import typer

    from kvbench.run.commands import register

    app = typer.Typer()
    register(app)
    run = next(c for c in app.registered_commands if c.name == "run")
    params = set(inspect.signature(run.callback).parameters)
    keys = flag_keys(Scenario)
    assert set(keys) <= params, set(keys) - params
    assert keys["concurrency"] == "load.concurrency" and keys["noisy"] == "test.noisy.enabled"


def test_run_flags_map_to_new_paths() -> None:
    from kvbench.run.commands import build_overrides

    out = build_overrides(baseline=True, noisy=False, concurrency=8, lengths="1k,2k", api_key_env="K")
    assert out == {
        "test.baseline": True,
        "load.concurrency": 8,
        "prompts.lengths": [1000, 2000],
        "target.api_key_env": "K",
    }


def test_resolved_scenario_yaml_reads_back_the_same() -> None:
    import yaml

    from kvbench.scenario import PACKAGE_SCENARIOS, scenario_to_yaml, validate_scenario

    for path in sorted(PACKAGE_SCENARIOS.glob("*.yaml")):
        scn, _ = load_scenario(str(path))
        again = validate_scenario(yaml.safe_load(scenario_to_yaml(scn)), "resolved")
        assert again == scn, path.name
