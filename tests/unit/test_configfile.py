"""configfile: one bounded YAML reader, one --set parser that reads values as the field's type,
one `field.path: message` formatter."""

from __future__ import annotations

import sys

import pytest

from kvbench.cli import main
from kvbench.configfile import Raw, apply_overrides, field_at, parse_set, read_value, read_yaml
from kvbench.errors import ConfigFileError, UsageError
from kvbench.scenario import Scenario, load_scenario


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["kvbench", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("telemetry.metrics", "off", "off"),  # YAML alone reads false, the field is Literal["auto", "off"]
        ("cache.verify", "off", "off"),
        ("output.ignore_eos", "off", False),
        ("output.ignore_eos", "yes", True),
        ("target.model", "123", "123"),  # a str field keeps the text
        ("load.concurrency", "8", 8),
        ("prompts.lengths", "[100, 200]", [100, 200]),
        ("target.mock_overrides.time_scale", "0.05", 0.05),
        ("target.base_url", "null", None),
    ],
)
def test_set_value_is_read_as_the_fields_type(key: str, raw: str, expected: object) -> None:
    data = {"load": {"kind": "concurrent"}}
    assert _get(apply_overrides(data, {key: Raw(raw)}, Scenario), key) == expected


def _get(data: dict, key: str) -> object:
    for part in key.split("."):
        data = data[part]
    return data


def test_shipped_scenario_accepts_off_values() -> None:
    scn, _ = load_scenario("ttft", {"telemetry.metrics": Raw("off")})
    assert scn.telemetry.metrics == "off"
    scn, _ = load_scenario("ttft", {"cache.verify": Raw("off")})
    assert scn.cache.verify == "off"


@pytest.mark.parametrize("raw", ["abc", "5"])
def test_bad_lengths_is_one_line_naming_the_field(monkeypatch, capsys, raw: str) -> None:
    code, _, err = _cli(monkeypatch, capsys, "validate", "ttft", "--set", f"prompts.lengths={raw}")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvbench: prompts.lengths: "), lines


def test_bad_lengths_in_run_exits_2_before_anything(monkeypatch, capsys, tmp_path) -> None:
    code, _, err = _cli(
        monkeypatch, capsys, "run", "ttft", "--set", "prompts.lengths=abc", "--output-dir", str(tmp_path)
    )
    assert code == 2 and "prompts.lengths" in err and not list(tmp_path.iterdir())


def test_set_without_equals_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        parse_set(["load.concurrency"])
    assert parse_set(["target.model="]) == {"target.model": ""}


def test_field_at_follows_the_discriminator() -> None:
    assert field_at(Scenario, "load.rate", {"load": {"kind": "rate"}}) is not None
    assert field_at(Scenario, "load.rate", {"load": {"kind": "concurrent"}}) is None
    assert field_at(Scenario, "no.such.key") is None


def test_read_value_reports_the_field() -> None:
    with pytest.raises(
        UsageError,
        match=r"^load\.concurrency: must be a valid integer.*\(--set load\.concurrency=x\)$",
    ):
        read_value(
            field_at(Scenario, "load.concurrency", {"load": {"kind": "concurrent"}}), "x", "load.concurrency"
        )


def test_read_yaml_bounds(tmp_path) -> None:
    with pytest.raises(ConfigFileError, match="limited to"):
        read_yaml(b"a: 1\n" + b"#" * 2_000_000, "big.yaml")
    bomb = b'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
    for i in range(1, 8):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [*{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}, *{chr(96 + i)}]\n".encode()  # noqa: E501
    with pytest.raises(ConfigFileError, match="expands to more than"):
        read_yaml(bomb, "bomb.yaml")
    with pytest.raises(ConfigFileError, match="not UTF-8"):
        read_yaml(b"\xff\xfe", "x.yaml")
    p = tmp_path / "ok.yaml"
    p.write_text("a: [1, 2]\n")
    assert read_yaml(p) == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("key", "names"),
    [("noise.kind", ["none", "tcp", "iperf3", "fio"]), ("load.kind", ["sequential", "concurrent", "rate"])],
)
def test_a_bad_union_tag_lists_every_known_name(key: str, names: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        load_scenario("throughput", {key: Raw("nosuch")})
    line = str(err.value)
    assert line.startswith(f"{key}: ") and "\n" not in line
    assert all(f"'{n}'" in line for n in names), line
