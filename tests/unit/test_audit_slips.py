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
