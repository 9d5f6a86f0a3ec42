from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbench.errors import ScenarioError
from kvbench.scenario import PACKAGE_SCENARIOS, Scenario, load_scenario, parse_yaml_text, validate_scenario

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_scenario_validates(path):
    scn, _ = load_scenario(str(path))
    assert isinstance(scn, Scenario)
    assert scn.name


def test_package_copy_is_the_same_folder():
    assert {p.name for p in PACKAGE_SCENARIOS.glob("*.yaml")} == {p.name for p in SHIPPED}


def test_published_parameters():
    ttft, _ = load_scenario("ttft")
    assert ttft.prompts.lengths == [30000, 50000, 70000, 90000, 110000, 130000]
    thr, _ = load_scenario("throughput")
    assert (thr.load.concurrency, thr.load.requests, thr.prompts.count) == (28, 200, 100)
    lo, hi = thr.prompts.lengths.min, thr.prompts.lengths.max
    assert (lo + hi) / 2 * thr.load.requests == 24_000_000


def base(**kw):
    d = {"name": "x", "test": "ttft", "prompts": {"lengths": [100]}}
    d.update(kw)
    return d


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (base(bogus=1), "bogus: unknown key"),
        (base(prompts={"lengths": []}), "prompts.lengths: must list at least one length"),
        (base(prompts={"lengths": [100], "sede": 1}), "prompts.sede: unknown key"),
        (
            base(test="throughput", load={"kind": "concurrent", "concurrency": 0, "requests": 5}),
            "load.concurrency: Input should be greater than 0",
        ),
        (base(load={"kind": "warp"}), "load: kind 'warp' is not one of concurrent, rate, sequential"),
        (base(target={"base_url": "localhost:8000"}), "target.base_url: must start with http"),
        (base(target={"api_key_env": "sk-abc123"}), "target.api_key_env: String should match pattern"),
        (base(target={"max_model_len": 120}, output={"max_tokens": 32}), "exceeds target.max_model_len"),
        (
            base(test="throughput", load={"kind": "concurrent", "concurrency": 2, "requests": "lots"}),
            "load.requests: Input should be a valid integer",
        ),
    ],
)
def test_bad_scenarios_name_the_field(data, expected):
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert any(expected in line for line in err.value.lines()), err.value.lines()


def test_yaml_alias_bomb_is_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20)
    )
    with pytest.raises(ScenarioError, match="expands to more than"):
        parse_yaml_text(bomb.encode(), "bomb.yaml")


def test_non_utf8_and_syntax_errors():
    with pytest.raises(ScenarioError, match="not UTF-8"):
        parse_yaml_text(b"name: \xff\xfe", "x")
    with pytest.raises(ScenarioError, match="line 2"):
        parse_yaml_text(b"name: x\n  bad: [", "x")


def test_cli_validate_and_errors(tmp_path):
    from kvbench.cli import _register_subcommands, app

    _register_subcommands()
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", "ttft"])
    assert ok.exit_code == 0 and "lengths:" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntest: ttft\nprompts: {lengths: [10]}\nextra_field: 3\n")
    res = runner.invoke(app, ["validate", str(bad)])
    assert res.exit_code != 0
    assert isinstance(res.exception, ScenarioError)
    assert res.exception.lines() == [f"{bad}: extra_field: unknown key"]
