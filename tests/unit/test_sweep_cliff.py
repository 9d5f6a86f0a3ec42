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


def test_working_set_sweeps_need_the_ttft_or_throughput_test_with_one_length():
    scn, _ = load_scenario("throughput", {})  # its prompts are a range of lengths
    with pytest.raises(UsageError, match="needs the ttft or throughput test with one prompt length"):
        prompt_length(scn)
    with pytest.raises(UsageError, match="needs the ttft or throughput test"):
        prompt_length(load_scenario("sessions", {})[0])
    one = {"prompts.lengths": Raw("[512]")}
    assert prompt_length(load_scenario("throughput", one)[0]) == 512
    noisy = {**one, "test.noisy.enabled": Raw("true")}
    with pytest.raises(UsageError, match="plain cached phase"):
        prompt_length(load_scenario("throughput", noisy)[0])


def test_a_throughput_working_set_is_distinct_prompts_each_sent_passes_times():
    from kvbench.sweep.cliff import PASSES

    # 1,200 tokens of 512-token prompts: 3 prompts (1,536 tokens sent), each used PASSES times
    assert expand({"working_set": "1200", "load.concurrency": "2"}, 512, "throughput") == {
        "load.concurrency": "2",
        "prompts.count": "3",
        "load.requests": str(3 * PASSES),
    }
    assert expand({"working_set": "100"}, 512, "throughput")["prompts.count"] == "1"
    assert effective_working_set(1200, 512) == 1536 and effective_working_set(100, 512) == 512


def _row(rid, pid, sent, end):
    return {"request_id": rid, "prompt_id": pid, "sent_ns": sent, "end_ns": end, "status": "ok"}


def test_throughput_repeats_leave_out_first_uses_and_ones_sent_in_flight():
    from kvbench.sweep.cliff import repeats

    rows = [_row("a", 0, 0, 10), _row("b", 1, 1, 5), _row("c", 1, 3, 8), _row("d", 0, 11, 20)]
    rows.append(_row("e", 1, 9, 12))  # after c ended (8): a repeat; c was sent while b ran
    assert [r["request_id"] for r in repeats(rows)] == ["e", "d"]


def test_a_throughput_point_is_served_by_the_slowest_tier_with_a_share(tmp_path):
    import json

    from kvbench.sweep.cliff import MIN_SHARE, throughput_tier

    def truth(rid, g1, g2, computed):
        by_tier = {"G1": g1, "G2": g2, "G3": 0, "G4": 0}
        t = {"request_id": rid, "status": "ok", "prompt_tokens": g1 + g2 + computed}
        return {**t, "cached_tokens": g1 + g2, "tokens_from_tier": by_tier}

    def tier(repeat_truth):
        first = truth("r0", 0, 0, 512)  # the cold first use: all computed, and not counted
        lines = [json.dumps(t) for t in [first, *repeat_truth]]
        (tmp_path / "mock_ground_truth.jsonl").write_text("\n".join(lines) + "\n")
        rows = [_row("r0", 0, 0, 1)] + [_row(t["request_id"], 0, 2 + 2 * i, 3 + 2 * i) for i, t in
                                       enumerate(repeat_truth)]  # fmt: skip
        return throughput_tier(tmp_path, rows)

    assert tier([truth("r1", 496, 0, 16), truth("r2", 496, 0, 16)]) == "G1"  # the tail block is computed
    assert tier([truth("r1", 48, 0, 16)]) == "G1"  # a short prompt's computed tail is no miss
    # G1 served most, but a tenth came from G2: the set already passed G1
    g1 = [truth(f"r{i}", 496, 0, 16) for i in range(1, 10)]
    assert tier([*g1, truth("r10", 0, 496, 16)]) == "G2"
    few = int(1 / MIN_SHARE) + 1  # one G2 repeat among more than 1 / MIN_SHARE is below the share
    assert tier([truth(f"r{i}", 496, 0, 16) for i in range(1, few + 1)] + [truth("r0x", 0, 496, 16)]) == "G1"
    assert tier([truth("r1", 0, 0, 512), truth("r2", 0, 496, 16)]) == "recompute"
    assert tier([truth("r1", 200, 0, 312)]) == "recompute"  # under half cached: recomputed
    assert tier([]) is None


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


# -- --tiers, the adapters' sizes, real servers' observations -------------------------------------


def test_tiers_read_bytes_tokens_and_slots():
    from kvbench.sweep.tiers import parse_tiers

    spec = parse_tiers("G1=2slots,G2=16MiB,g3=20k,kv=4KiB")
    caps = {c.tier: c for c in spec.capacities}
    assert caps["G1"].sequences == 2 and caps["G2"].bytes == 16 * 2**20 and caps["G3"].tokens == 20_000
    assert spec.kv_bytes_per_token == 4096 and caps["G2"].source == "--tiers G2=16MiB"
    geo = parse_tiers("G1=1GiB,kv=llama-3.1-8b")
    assert geo.kv_bytes_per_token == PRESETS["llama-3.1-8b"].bytes_per_token(False)
    for bad, words in (("G9=1k", "not a tier"), ("G1", "TIER=SIZE"), ("G1=lots", "expected bytes"),
                       ("G1=1k,kv=lots", "preset")):  # fmt: skip
        with pytest.raises(UsageError, match=words):
            parse_tiers(bad)


def test_a_tier_holds_whole_prompts_with_their_output_in_its_blocks():
    from kvbench.engines.adapters import TierCapacity
    from kvbench.sweep.tiers import boundary_tokens

    # 9 MiB of 4 KiB tokens is 2304 tokens: four 512 + 4-token prompts (a fifth would need 2580)
    assert boundary_tokens(TierCapacity("G2", bytes=9 * 2**20), 512, 4, 4096) == 4 * 512
    # 15 blocks of 128, one always in flight: a 512 + 4-token prompt keeps its 4 full blocks
    # (515 tokens of KV) and its warm request needs 3 (511 // 128): 2 x 4 + 3 + 1 <= 15 < 3 x 4 + 4
    vllm = TierCapacity("G1", 1920, block_tokens=128)
    assert boundary_tokens(vllm, 512, 4, None) == 3 * 512
    # 384 + 4 tokens: 3 full blocks kept, 2 needed: 4 x 3 + 2 + 1 = 15, five prompts (not 15 // 4)
    assert boundary_tokens(vllm, 384, 4, None) == 5 * 384
    assert boundary_tokens(TierCapacity("G1", 256, block_tokens=128), 512, 4, None) == 0
    assert boundary_tokens(TierCapacity("G1", 2048, sequences=2), 512, 4, None) == 1024
    assert boundary_tokens(TierCapacity("G1", 256, sequences=2), 512, 4, None) == 0  # longer than a slot
    assert boundary_tokens(TierCapacity("G2", bytes=1e9), 512, 4, None) is None  # bytes, no KV size


def test_adapters_read_the_tier_sizes_their_servers_report():
    from kvbench.engines.adapters import get_adapter

    metrics = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="128",engine="0",num_cpu_blocks="None",num_gpu_blocks="16"} 1.0\n'
    )
    [g1] = get_adapter("vllm").tier_capacities({"/metrics": metrics})
    assert (g1.tier, g1.tokens, g1.block_tokens) == ("G1", 15 * 128, 128)  # less vLLM's null block
    assert "cache_config_info" in g1.source
    props = '{"total_slots": 3, "default_generation_settings": {"n_ctx": 4096}}'
    [slots] = get_adapter("llamacpp").tier_capacities({"/props": props})
    assert (slots.tier, slots.sequences, slots.tokens) == ("G1", 3, 4096)
    assert get_adapter("llamacpp").tier_capacities({"/props": "not json"}) == []
    assert get_adapter("vllm").tier_capacities({}) == [] and get_adapter("generic").capacity_paths == ()


def test_tiers_win_over_the_server_and_the_mock_profile():
    from kvbench.engines.adapters import TierCapacity
    from kvbench.sweep.tiers import parse_tiers

    real = {"prompts.lengths": Raw("[512]"), "output.max_tokens": Raw("4")}
    real["target.base_url"] = Raw("http://127.0.0.1:9")
    scn, _ = load_scenario("ttft", real)
    reported = [TierCapacity("G1", 2048, sequences=1, source="adapter: llamacpp /props")]
    bounds, source = predicted_boundaries(scn, parse_tiers("G2=9MiB,kv=4KiB"), reported)
    assert [(b.tier, b.tokens, b.next_tier) for b in bounds] == [("G1", 512, "G2"), ("G2", 2048, "recompute")]
    assert "adapter: llamacpp /props" in source and "--tiers G2=9MiB" in source
    assert predicted_boundaries(scn)[0] == [] and "give --tiers" in predicted_boundaries(scn)[1]
    unsized, why = predicted_boundaries(scn, parse_tiers("G1=64MiB"))  # a server's bytes, no KV size
    assert unsized == [] and "need kv=" in why
    mock = {"target.mock_profile": Raw("laptop"), "prompts.lengths": Raw("[4000]")}
    scn, _ = load_scenario("ttft", mock)
    bounds, source = predicted_boundaries(scn, parse_tiers("G1=8100"))  # two 4000 + 16-token prompts
    assert bounds[0].tokens == 8000 and bounds[0].source == "--tiers G1=8100" and "laptop" in source
    assert predicted_boundaries(scn, parse_tiers("G1=8k"))[0][0].tokens == 4000  # 8000 < 2 x 4016


def test_a_hit_of_unknown_tier_places_only_the_last_cliff():
    bounds = [Boundary("G1", 512, "G2"), Boundary("G2", 2048, "recompute")]
    seen = [(512, "cached"), (1024, "cached"), (2048, "cached"), (2560, "recompute")]
    g1, g2 = cliff_table(seen, bounds)
    assert g1["within_one_step"] is None and g1["observed_last_inside"] is None
    assert (g2["observed_last_inside"], g2["observed_first_beyond"], g2["within_one_step"]) == (
        2048,
        2560,
        True,
    )
    # a partial hit is past the cliff: the tier already dropped part of the working set
    part = cliff_table(
        [(1536, "G1"), (2048, "partial"), (2560, "recompute")], [Boundary("G1", 1536, "recompute")]
    )
    assert part[0]["observed_first_beyond"] == 2048 and part[0]["within_one_step"] is True


def test_a_partial_hit_is_one_below_the_sweeps_best():
    from types import SimpleNamespace

    from kvbench.sweep.cliff import mark_partial

    def point(ratio, tier, seen_by="server"):
        metrics = {"hit_ratio": ratio, "serving_tier": tier, "tier_seen_by": seen_by}
        return SimpleNamespace(metrics=metrics)

    pts = [
        point(0.75, "G1"),
        point(0.5, "G1"),
        point(0.0, "recompute"),
        point(0.5, "G2", "mock ground truth"),
    ]
    mark_partial(pts)
    assert [p.metrics["serving_tier"] for p in pts] == ["G1", "partial", "recompute", "G2"]
