"""Readings as slip kinds (kvbench.audit.readings.slips): one fictional paper per kind in
tests/data/claims/slips/ (the key is in each file's header), and the coincidence rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.audit import audit, load_claims
from kvbench.audit.figures import Figures
from kvbench.audit.readings.pool import Search
from kvbench.audit.readings.slips import SLIPS, dropped_multiplier

DATA = Path(__file__).resolve().parents[1] / "data" / "claims"
SLIPS_DIR = DATA / "slips"

# file -> claim -> (slip of the first reading, its value, words its text must carry)
KEY = {
    "bits_bytes.yaml": {"nic-gbs": ("bits_bytes", 200.0, "bits taken for bytes")},
    "token_request_rate.yaml": {"throughput": ("count_relabel", 4800.0, "tokens counted as requests")},
    "points_percent.yaml": {
        "hit-gain": ("points_percent", 10.0, "in percentage points, not percent"),
        "hit-gain-points": ("points_percent", 25.0, "in percent, not percentage points"),
    },
    "prefix_compound.yaml": {
        "mean-ttft": ("unit_prefix", 450.0, "is 450 ms/request"),
        "energy-per-request": ("unit_prefix", 0.09, "is 0.09000 kJ/request"),
    },
    "dropped_multiplier.yaml": {
        "per-gpu": ("dropped_multiplier", 40.0, "a total over the 4 GPUs, not per GPU")
    },
    "per_device.yaml": {"node-net": ("per_device", 200.0, "a per-GPU figure stated for all 8 GPUs")},
    "device_price.yaml": {
        "cost-per-m": ("device_price", 400 / 7.2, "a one-GPU price set against the rate of all 8 GPUs")
    },
    "percent_ratio.yaml": {"speedup": ("percent_ratio", 5.25, "restated as a ratio, not the ratio 6.250x")},
    "binary_decimal.yaml": {"tokens-held": ("binary_decimal", 2e12 / 163840 / 1e6, "taken as 2 TB, not TiB")},
}
#: the kinds the papers under tests/data/claims/papers/ and planted.yaml already cover
COVERED_ELSEWHERE = {"relative_base", "inverse", "sibling_unit"}


def _claims(name: str) -> dict:
    return {c.id: c for c in audit(load_claims(SLIPS_DIR / name)).claims}


def test_every_slip_kind_has_a_paper():
    assert {p.name for p in SLIPS_DIR.glob("*.yaml")} == set(KEY)
    kinds = {slip for claims in KEY.values() for slip, _, _ in claims.values()}
    assert kinds | COVERED_ELSEWHERE == {s.name for s in SLIPS}


@pytest.mark.parametrize(("name", "cid"), [(n, c) for n, cs in sorted(KEY.items()) for c in cs])
def test_slip_paper_gets_its_reading(name, cid):
    slip, value, words = KEY[name][cid]
    c = _claims(name)[cid]
    assert c.verdict == "discrepancy"
    assert c.readings, c.headline
    first = c.readings[0]
    assert first.slip == slip and first.value == pytest.approx(value, rel=1e-6), first
    assert words in first.text, first.text
    assert c.stated_range[0] <= first.value < c.stated_range[1]  # it explains the stated value


def test_a_coincidental_multiplier_is_not_offered_beside_a_unit_slip():
    cf = load_claims(SLIPS_DIR / "bits_bytes.yaml")
    figs = Figures(cf)
    claim = cf.claims[0]
    s = Search(figs, claim)
    rc = next(c for c in audit(cf).claims if c.id == claim.id).recomputed
    dropped_multiplier(s, rc)  # alone, the 8 GPUs per node would "explain" 25 GB/s -> 200
    assert any("8 GPUs" in r.text for r, _ in s.found)
    readings = _claims("bits_bytes.yaml")["nic-gbs"].readings
    assert [r.slip for r in readings] == ["bits_bytes"]


def test_clean_paper_gets_no_slip_reading():
    # the slips only ever run on a discrepancy, and a clean paper has none
    led = audit(load_claims(DATA / "papers" / "paper_c_clean.yaml"))
    assert all(c.verdict == "consistent" and not c.readings for c in led.claims)


def test_a_count_in_the_claims_own_arithmetic_is_not_a_bits_bytes_coincidence():
    # 1,600 Gbit/s is also 200 GB/s (the same x8): the 8 GPUs the claim multiplies by explain it
    readings = _claims("per_device.yaml")["node-net"].readings
    assert [r.slip for r in readings] == ["per_device"]


def test_the_increase_and_its_ratio_are_told_apart():
    claims = _claims("percent_ratio.yaml")
    assert claims["increase"].verdict == "consistent" and not claims["increase"].readings


def test_a_ratio_written_as_the_increase_gets_the_reverse_reading():
    from kvbench.audit import parse_claims

    doc = {
        "schema": "kvbench-claims/1",
        "name": "t",
        "figures": [
            {"id": "a", "value": 400, "unit": "tokens/s"},
            {"id": "b", "value": 2500, "unit": "tokens/s"},
        ],
        "claims": [{"id": "inc", "expr": "percent_increase(a, b)", "stated": 625, "unit": "%"}],
    }
    c = audit(parse_claims(doc)).claims[0]
    assert c.verdict == "discrepancy" and c.readings[0].slip == "percent_ratio"
    assert c.readings[0].value == pytest.approx(625.0) and "written as the increase" in c.readings[0].text
