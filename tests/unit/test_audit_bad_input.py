"""Malformed claims files: one `kvbench: FILE: message` line on stderr, exit 2, never a traceback.

Each file in tests/data/claims/bad/ is listed here with the words its message must carry, and a
completeness test keeps the two in step (like tests/unit/test_bad_input.py for scenarios).
"""

from pathlib import Path

import pytest

BAD = Path(__file__).resolve().parents[1] / "data" / "claims" / "bad"

EXPECTED = {
    "absurd_decimals.yaml": "figures[0].decimals: Input should be greater than or equal to -15",
    "add_seconds_to_gigabytes.yaml": "claims[0] 'total': cannot add s and GB",
    "arity.yaml": "ratio() takes 2 argument(s), got 1",
    "attribute.yaml": "Attribute is not allowed",
    "claim_division_by_zero.yaml": "claims 'c' = ratio(a, z): division by zero (z = 0)",
    "claim_unit_mismatch.yaml": "claims[0] 'rate-in-gb': the expression gives requests/s",
    "complex_result.yaml": "no real result",
    "bad_inline_geometry.yaml": "model.geometry.num_layers: expected a whole number >= 1",
    "cycle.yaml": "derived figures form a cycle: a -> b -> a",
    "derived_division_by_zero.yaml": "figures 'rate' = jobs / time: division by zero (time = 0)",
    "derived_unit_mismatch.yaml": "figures[2] 'rate': the expression gives requests/s",
    "dimensioned_power.yaml": "a quantity in s can only be raised to a small whole constant power",
    "empty.yaml": "the file is empty",
    "deep_nesting.yaml": "nested too deeply",
    "figure_named_like_function.yaml": "'ratio' is a function name",
    "function_as_value.yaml": "function 'ratio' used as a value",
    "huge_int_literal.yaml": "number too large",
    "huge_literal.yaml": "number too large",
    "infinite_stated.yaml": "claims[0].stated: must be a finite number",
    "missing_geometry_file.yaml": "is neither a preset",
    "nan_value.yaml": "figures[0].value: must be a finite number",
    "overflow_power.yaml": "the result overflows",
    "top_level_list.yaml": "top level must be a mapping, not list",
    "unknown_bound_kind.yaml": "unknown bound kind 'warp_drive' (known: cold_reuse",
    "unknown_figure.yaml": "claims[1].expr: unknown figure 'foo'",
    "unknown_key.yaml": "colour: Extra inputs are not permitted",
    "unknown_unit.yaml": "unknown unit 'furlongs' (known: time s ms",
    "wrong_schema.yaml": "unsupported schema 'other/2'",
    "yaml_syntax.yaml": "YAML syntax error: line",
    "zero_prompts_bound.yaml": "bounds 'b': figure 'p' must be positive",
    "zero_tokens_bound.yaml": "bounds 'g': figure 'tok' must be positive",
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
