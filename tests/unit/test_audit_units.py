"""The audit's unit table: suggestions for unknown words, the unit that would fit a claim's
arithmetic, and the slips one unit is from another (kvbench.audit.units)."""

from __future__ import annotations

import pytest

from kvbench.audit.units import UnitError, known_units, parse_unit, suggest_unit, unit_variants


@pytest.mark.parametrize(
    ("word", "fix"),
    [
        ("sessons", "sessions"),
        ("secnds", "seconds"),
        ("number", '"1"'),
        ("tokns", "tokens"),
        ("GiBs", "GiB"),
        ("Gb", "Gbit"),
        ("furlongs", None),
    ],
)
def test_unknown_unit_suggests_a_fix_without_listing_the_table(word, fix):
    with pytest.raises(UnitError) as exc:
        parse_unit(word)
    assert exc.value.fix == fix
    assert len(str(exc.value)) < 120 and "known:" not in str(exc.value)


@pytest.mark.parametrize(
    ("want", "got", "fix"),
    [
        ("ms", "s/request", "ms/request"),
        ("s", "s*requests", "s*requests"),
        ("req/s", "tokens/s", "tokens/s"),
        ("x", "s", "s"),
        ("GB", "GB", "GB"),
    ],
)
def test_suggested_unit_has_the_expression_dimension(want, got, fix):
    w, g = parse_unit(want), parse_unit(got).dims
    out = suggest_unit(w, g) if w.dims != g else want
    assert out == fix and parse_unit(out).dims == g


def test_unit_variants_are_one_slip_away():
    assert ("ms/request", "prefix") in unit_variants(parse_unit("s/request"))
    assert ("Gbit/s", "bits") in unit_variants(parse_unit("GB/s"))
    assert ("kJ/request", "prefix") in unit_variants(parse_unit("J/request", ["J"]), ["J"])
    for alt, _ in unit_variants(parse_unit("GB/s")):
        assert parse_unit(alt).dims == parse_unit("GB/s").dims and parse_unit(alt).factor != 1e9


def test_bits_and_the_plain_number_are_in_the_table():
    assert parse_unit("Gbit/s").factor == pytest.approx(1e9 / 8)
    assert parse_unit("1").dims == () and '"1" (a plain number)' in known_units()
    assert "Gbit" in known_units()
    assert parse_unit("Gbps").dims == parse_unit("GB/s").dims
    assert parse_unit("Gbps").factor == parse_unit("Gbit/s").factor
    assert parse_unit("percent").factor == parse_unit("%").factor
