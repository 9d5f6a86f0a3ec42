"""Tiered prefix cache: hits, misses and LRU eviction per tier; reset; persistence."""

import pytest

from kvbench.mock.cache import TieredKVCache

TIERS = ("G1", "G2", "G3", "G4")


def only(tier, capacity=4):
    return TieredKVCache(dict.fromkeys(TIERS, capacity), {t: t == tier for t in TIERS}, 16)


def fill(cache, keys):
    hit = cache.lookup(keys, len(keys))
    cache.commit(keys, hit, len(keys))
    return hit


@pytest.mark.parametrize("tier", TIERS)
def test_hit_miss_and_eviction_in_each_tier(tier):
    cache = only(tier)
    a, b = [1, 2, 3], [11, 12, 13]
    assert fill(cache, a).num_blocks == 0  # miss
    hit = cache.lookup(a, 3)
    assert hit.num_blocks == 3 and hit.blocks_by_tier[tier] == 3  # hit
    assert cache.lookup([1, 2, 99], 3).num_blocks == 2  # prefix only
    assert cache.lookup(a, 2).num_blocks == 2  # capped by max_blocks
    fill(cache, b)  # 6 blocks > capacity 4: a's oldest blocks go
    assert cache.lookup(a, 3).num_blocks == 0
    assert cache.lookup(b, 3).blocks_by_tier[tier] == 3
    assert cache.tier(tier).evicted_blocks == 2


@pytest.mark.parametrize("tier", TIERS)
def test_disabled_tier_never_hits(tier):
    enabled = {t: t != tier for t in TIERS}
    cache = TieredKVCache(dict.fromkeys(TIERS, 100), enabled, 16)
    fill(cache, [1, 2, 3])
    assert len(cache.tier(tier)) == 0
    assert cache.lookup([1, 2, 3], 3).blocks_by_tier[tier] == 0


def test_block_counts_in_fastest_tier_and_evicted_blocks_come_back_from_lower_tiers():
    cache = TieredKVCache({"G1": 2, "G2": 4, "G3": 6, "G4": 100}, dict.fromkeys(TIERS, True), 16)
    a = [1, 2, 3]
    fill(cache, a)
    assert cache.lookup(a, 3).blocks_by_tier["G1"] == 2  # G1 kept the last 2
    assert cache.lookup(a, 3).blocks_by_tier["G2"] == 1
    fill(cache, [11, 12, 13])
    fill(cache, [21, 22, 23])
    hit = cache.lookup(a, 3)
    assert hit.num_blocks == 3
    assert hit.blocks_by_tier["G1"] == 0 and hit.blocks_by_tier["G2"] == 0
    assert hit.blocks_by_tier["G3"] == 0 and hit.blocks_by_tier["G4"] == 3
    assert hit.runs == [("G4", 0, 3)]
    cache.commit(a, hit, 3)  # onboarded: placed back in G1 and G2
    assert cache.lookup(a, 3).blocks_by_tier["G1"] == 2


def test_reset_empties_every_tier():
    cache = TieredKVCache(dict.fromkeys(TIERS, 100), dict.fromkeys(TIERS, True), 16)
    fill(cache, [1, 2, 3])
    cache.reset(include_persistent=False)
    assert all(len(t) == 0 for t in cache.tiers)


def test_persisted_g4_survives_restart_and_plain_reset(tmp_path):
    def make():
        return TieredKVCache(
            dict.fromkeys(TIERS, 100), {t: t == "G4" for t in TIERS}, 16, tmp_path, {"model": "m"}
        )

    cache = make()
    fill(cache, [1, 2, 3])
    cache.close()
    cache = make()
    assert cache.lookup([1, 2, 3], 3).blocks_by_tier["G4"] == 3
    cache.reset(include_persistent=False)  # persisted G4 kept
    assert cache.lookup([1, 2, 3], 3).num_blocks == 3
    cache.reset(include_persistent=True)
    assert cache.lookup([1, 2, 3], 3).num_blocks == 0
    cache.close()
    assert make().lookup([1, 2, 3], 3).num_blocks == 0


def test_persisted_index_for_another_model_is_ignored(tmp_path):
    caps, en = dict.fromkeys(TIERS, 100), {t: t == "G4" for t in TIERS}
    c1 = TieredKVCache(caps, en, 16, tmp_path, {"model": "a"})
    fill(c1, [1, 2])
    c1.close()
    c2 = TieredKVCache(caps, en, 16, tmp_path, {"model": "b"})
    assert c2.lookup([1, 2], 2).num_blocks == 0
