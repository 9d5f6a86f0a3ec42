"""The tier-cliff map's pure parts: working-set points as fillers, the boundaries the laptop
profile predicts from its capacities and KV size, and predicted vs observed."""

import pytest

from kvbench.configfile import Raw
from kvbench.errors import UsageError
from kvbench.model.kv_geometry import PRESETS
from kvbench.scenario import load_scenario
from kvbench.sweep.cliff import (
    Boundary,
    cliff_table,
    effective_working_set,
    expand,
    parse_tokens,
    predicted_boundaries,
    predicted_tier,
    prompt_length,
)


def test_tokens_read_with_decimal_and_binary_suffixes():
    assert (
        parse_tokens("16k") == 16_000 and parse_tokens("16Ki") == 16_384 and parse_tokens("1.5M") == 1_500_000
    )
    with pytest.raises(UsageError, match="expected tokens"):
        parse_tokens("lots")


def test_a_working_set_becomes_fillers_beyond_the_prompt():
    assert expand({"working_set": "12k"}, 4000) == {"test.eviction": "filler", "test.filler_tokens": "8000"}
    assert expand({"working_set": "4k"}, 4000) == {"test.eviction": "none"}
    with pytest.raises(UsageError, match="below the prompt"):
        expand({"working_set": "1k"}, 4000)
    # ttft sends whole fillers of the prompt's length: 10k over a 4k prompt is 4k + 2 x 4k
    assert effective_working_set(10_000, 4000) == 12_000


def test_laptop_boundaries_are_its_capacities_over_kv_bytes_per_token():
    scn, _ = load_scenario("ttft", {"target.mock_profile": Raw("laptop"), "prompts.lengths": Raw("[4000]")})
    assert prompt_length(scn) == 4000
    boundaries, source = predicted_boundaries(scn)
    per_token = PRESETS["llama-3.1-8b"].bytes_per_token(False)
    gib = 1 << 30
    expected = {"G1": 2 * gib, "G2": 4 * gib, "G3": 16 * gib, "G4": 64 * gib}
    assert [b.tier for b in boundaries] == ["G1", "G2", "G3", "G4"]
    for b in boundaries:
        assert b.tokens == expected[b.tier] // per_token
    assert boundaries[-1].next_tier == "recompute" and "laptop" in source
    assert predicted_tier(boundaries[0].tokens, boundaries) == "G1"
    assert predicted_tier(boundaries[0].tokens + 16, boundaries) == "G2"
    assert predicted_tier(10**9, boundaries) == "recompute"


def test_a_disabled_or_smaller_tier_never_serves():
    over = {"target.mock_profile": Raw("laptop"), "prompts.lengths": Raw("[4000]")}
    over["target.mock_overrides"] = Raw("{tiers.G2.enabled: false, tiers.G4.capacity_bytes: 1073741824}")
    scn, _ = load_scenario("ttft", over)
    boundaries, _ = predicted_boundaries(scn)
    assert [(b.tier, b.next_tier) for b in boundaries] == [("G1", "G3"), ("G3", "recompute")]


def test_working_set_sweeps_need_the_ttft_test_with_one_length():
    scn, _ = load_scenario("throughput", {})
    with pytest.raises(UsageError, match="needs the ttft test"):
        prompt_length(scn)


def test_observed_cliffs_are_placed_between_sweep_points():
    bounds = [Boundary("G1", 16_384, "G2"), Boundary("G2", 32_768, "recompute")]
    seen = [(8000, "G1"), (12000, "G1"), (20000, "G2"), (30000, "G2"), (40000, "recompute")]
    table = cliff_table(seen, bounds)
    assert [(r["observed_last_inside"], r["observed_first_beyond"]) for r in table] == [
        (12000, 20000),
        (30000, 40000),
    ]
    assert all(r["within_one_step"] for r in table)
    # a cliff that came early (G1 ran out at 10k) is not within one step of 16,384
    early = cliff_table([(8000, "G1"), (10000, "G2"), (20000, "G2")], bounds)
    assert early[0]["within_one_step"] is False
    # never crossed: no observed position, so no claim
    assert cliff_table([(8000, "G1")], bounds)[0]["within_one_step"] is False
