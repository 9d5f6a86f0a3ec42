"""Malformed claims files, and files with one item that cannot be judged.

tests/data/claims/bad/: the file as a whole cannot be read: one `kvbench: FILE: message` line on
stderr, exit 2, never a traceback. tests/data/claims/invalid/: one figure, claim or bound is
wrong (its unit, its expression, a zero count): that item's verdict is `invalid` with a short
reason, the rest of the ledger is printed (exit 0), and `--strict` exits 1. Each file is listed
here with the words its message must carry, and completeness tests keep the lists in step.
"""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvbench.audit.commands import register

BAD = Path(__file__).resolve().parents[1] / "data" / "claims" / "bad"
INVALID = Path(__file__).resolve().parents[1] / "data" / "claims" / "invalid"

EXPECTED = {
    "absurd_decimals.yaml": "figures[0].decimals: Input should be greater than or equal to -15",
    "bad_inline_geometry.yaml": "model.geometry.num_layers: expected a whole number >= 1",
    "cycle.yaml": "derived figures form a cycle: a -> b -> a",
    "empty.yaml": "the file is empty",
    "deep_nesting.yaml": "nested too deeply",
    "figure_named_like_function.yaml": "'ratio' is a function name",
    "infinite_stated.yaml": "claims[0].stated: must be a finite number",
    "missing_geometry_file.yaml": "is neither a preset",
    "nan_value.yaml": "figures[0].value: must be a finite number",
    "top_level_list.yaml": "top level must be a mapping, not list",
    "unknown_bound_kind.yaml": "unknown bound kind 'warp_drive' (known: cold_reuse",
    "unknown_key.yaml": "colour: Extra inputs are not permitted",
    "wrong_schema.yaml": "unsupported schema 'other/2'",
    "yaml_syntax.yaml": "YAML syntax error: line",
    "bool_value.yaml": "figures[0].value: a number is meant, not the yes/no value true",
    "bool_decimals.yaml": "claims[0].decimals: a number is meant, not the yes/no value true",
    "duplicate_key.yaml": "line 6: key 'value' is given twice",
    "shadowing_unit.yaml": "units[0]: 'GB' is a built-in unit; remove it from `units:`",
    "quoted_number.yaml": "figures[0].value: a number is meant, not the text '4.26'",
}

# file -> (what, id, words its verdict line must carry)
INVALID_EXPECTED = {
    "add_seconds_to_gigabytes.yaml": ("claim", "total", "claims[0] 'total': cannot add s and GB"),
    "arity.yaml": ("claim", "c", "ratio() takes 2 argument(s), got 1"),
    "attribute.yaml": ("claim", "c", "Attribute is not allowed"),
    "claim_division_by_zero.yaml": ("claim", "c", "claims 'c' = ratio(a, z): division by zero (z = 0)"),
    "claim_unit_mismatch.yaml": (
        "claim",
        "rate-in-gb",
        "the expression gives requests/s, not GB; write unit: requests/s",
    ),
    "complex_result.yaml": ("claim", "c", "no real result"),
    "derived_division_by_zero.yaml": (
        "figure",
        "rate",
        "figures 'rate' = jobs / time: division by zero (time = 0)",
    ),
    "derived_unit_mismatch.yaml": (
        "figure",
        "rate",
        "figures[2] 'rate': the expression gives requests/s, not GB/s",
    ),
    "dimensioned_power.yaml": (
        "claim",
        "c",
        "a quantity in s can only be raised to a small whole constant power",
    ),
    "function_as_value.yaml": ("claim", "c", "function 'ratio' used as a value"),
    "huge_int_literal.yaml": ("claim", "c", "number too large"),
    "huge_literal.yaml": ("claim", "c", "number too large"),
    "overflow_power.yaml": ("claim", "c", "the result overflows"),
    "unknown_figure.yaml": ("claim", "broken", "claims[1].expr: unknown figure 'foo'"),
    "unknown_unit.yaml": ("claim", "c", "claims[0].unit: unknown unit 'furlongs'"),
    "zero_prompts_bound.yaml": ("bound", "b", "bounds 'b': figure 'p' must be positive"),
    "zero_tokens_bound.yaml": ("bound", "g", "bounds 'g': figure 'tok' must be positive"),
    "sizing_wrong_dimensions.yaml": ("sizing", "ws", "sizing[0].tokens: 'ttft' is in s; tokens needs tokens"),
    "bound_wrong_dimensions.yaml": (
        "bound",
        "bw",
        "bounds[0].noise: 'noise_total' is in GB; noise needs a rate",
    ),
}


def test_every_bad_claims_file_is_covered():
    assert {p.name for p in BAD.glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED.items()))
def test_bad_claims_file(run_cli, name, expected):
    code, _, err = run_cli("audit", str(BAD / name))
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"kvbench: {name}: "), lines
    assert expected in lines[0], lines


def test_every_invalid_item_file_is_covered():
    assert {p.name for p in INVALID.glob("*.yaml")} == set(INVALID_EXPECTED)


def _audit(*args: str) -> tuple[int, str]:
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["audit", *args])
    return res.exit_code, res.output


@pytest.mark.parametrize(("name", "expected"), sorted(INVALID_EXPECTED.items()))
def test_invalid_item_is_its_verdict_and_the_rest_is_judged(name, expected):
    what, item, words = expected
    code, out = _audit(str(INVALID / name), "--json")
    assert code == 0, out
    rows = {(r["what"], r["id"]): r for r in json.loads(out)["verdicts"]}
    row = rows[(what, item)]
    assert row["verdict"] == "invalid" and words in row["conclusion"], row
    assert len(row["conclusion"]) <= 200
    # every other claim still has a verdict of its own
    assert all(r["verdict"] != "invalid" for k, r in rows.items() if k != (what, item) and k[0] == "claim")
    code, out = _audit(str(INVALID / name))
    assert code == 0 and f"xx {item if what == 'claim' else what + ' ' + item}" in out, out
    assert _audit(str(INVALID / name), "--strict")[0] == 1


def test_many_problems_are_one_short_line(run_cli, tmp_path):
    f = tmp_path / "many.yaml"
    rows = "".join(f"  - {{id: f{i}, value: yes, unit: s}}\n" for i in range(40))
    f.write_text(f"schema: kvbench-claims/1\nname: m\nfigures:\n{rows}")
    code, _, err = run_cli("audit", str(f))
    assert code == 2 and "(and 37 more)" in err and len(err.strip()) < 400, err


def test_directory_and_missing_path(run_cli, tmp_path):
    code, _, err = run_cli("audit", str(tmp_path))
    assert code == 2 and "is a directory" in err and "internal error" not in err
    code, _, err = run_cli("audit", str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such claims file" in err


def test_alias_bomb_is_refused(run_cli, tmp_path):
    bomb = tmp_path / "bomb.yaml"
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev = chr(ord("a") + i - 1)
        rows.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [" + ", ".join([f"*{prev}"] * 10) + "]")
    bomb.write_text("\n".join(rows) + "\n")
    code, _, err = run_cli("audit", str(bomb))
    assert code == 2 and "expands to more than" in err


def _plain_figures(n: int) -> str:
    rows = [f"  - {{id: f{i}, value: {i + 1}, unit: s, test: t{i % 50}}}" for i in range(n)]
    claims = "  - {id: c0, expr: 'f0', stated: 1, unit: s}"
    return "schema: kvbench-claims/1\nname: big\nfigures:\n" + "\n".join(rows) + "\nclaims:\n" + claims + "\n"


def test_a_big_file_of_plain_figures_is_not_an_alias_bomb(tmp_path):
    # 9,000 figures are over 100,000 YAML nodes, none of them an alias: only the size limit applies
    from kvbench.audit import audit, load_claims

    big = tmp_path / "big.yaml"
    big.write_text(_plain_figures(9000))
    led = audit(load_claims(big))
    assert len(led.figures) == 9000 and [c.verdict for c in led.claims] == ["consistent"]


def test_the_size_limit_says_it_is_the_size(run_cli, tmp_path):
    big = tmp_path / "huge.yaml"
    big.write_text(_plain_figures(30000))
    code, _, err = run_cli("audit", str(big))
    assert code == 2 and "bytes; claims files are limited to" in err and "alias" not in err
