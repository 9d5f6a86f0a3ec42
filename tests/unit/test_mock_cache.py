"""Tiered prefix cache: hits, misses and LRU eviction per tier; reset; persistence."""

import pytest

from kvbench.mock.costs.cache import TieredKVCache

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


def _reference_lookup(cache, keys, max_blocks):
    """The per-block rule, one key at a time: (runs, num_blocks) as lookup() must give them."""
    runs, cur, start, n = [], None, 0, 0
    for i, key in enumerate(keys[:max_blocks]):
        name = next((t.name for t in cache.tiers if t.enabled and key in t.blocks), None)
        if name is None:
            break
        if name != cur:
            if cur is not None:
                runs.append((cur, start, i))
            cur, start = name, i
        n = i + 1
    if cur is not None:
        runs.append((cur, start, n))
    return runs, n


def test_fast_lookup_touch_and_insert_match_the_per_block_rule():
    """lookup/commit are the mock's hot path (C loops, deferred touches, a memo of replayed
    prompts); on random mixes of tiers, evictions, duplicates and replayed key tuples they give the
    same runs and the same LRU order as applying the rule one key at a time."""
    import random
    from collections import OrderedDict

    rng = random.Random(7)
    for trial in range(300):
        enabled = {t: rng.random() < 0.7 for t in TIERS}
        if trial % 3 == 0:  # one tier (the published G4-only shape): the memo is refreshed on commit
            enabled = {t: t == rng.choice(TIERS) for t in TIERS}
        cache = TieredKVCache({t: rng.choice((0, 3, 8, 20, 60, 200)) for t in TIERS}, enabled, 16)
        mirror = {t.name: OrderedDict() for t in cache.tiers}  # LRU order by the slow rule
        seen: list[tuple[int, ...]] = []
        for _ in range(12):
            keys = [rng.randint(0, 80) for _ in range(rng.randint(0, 40))]
            if seen and rng.random() < 0.5:  # a replayed prompt: the very same tuple (memo)
                keys = rng.choice(seen)
            elif rng.random() < 0.5:
                keys = tuple(keys)
                seen.append(keys)
            max_blocks = rng.randint(0, 45)
            hit = cache.lookup(keys, max_blocks)
            assert (hit.runs, hit.num_blocks) == _reference_lookup(cache, keys, max_blocks), trial
            if rng.random() < 0.3:  # another request's commit evicts some of the hit's blocks
                other = [rng.randint(100, 200) for _ in range(rng.randint(0, 30))]
                cache.commit(other, cache.lookup(other, 0), len(other))
                for t in cache.tiers:
                    _slow_insert(mirror[t.name], t, other)
            cache.commit(keys, hit, len(keys))
            for name, a, b in hit.runs:
                _slow_touch(mirror[name], keys[a:b])
                for t in cache.tiers:
                    if (t.name == "G1" and name != "G1") or (t.name == "G2" and name in ("G3", "G4")):
                        _slow_insert(mirror[t.name], t, keys[a:b])
            for t in cache.tiers:
                _slow_insert(mirror[t.name], t, keys[hit.num_blocks :])
                if rng.random() < 0.3:  # reading the order applies the pending touches
                    assert list(t.blocks) == list(mirror[t.name]), (trial, t.name)
        for t in cache.tiers:
            assert list(t.blocks) == list(mirror[t.name]), (trial, t.name)


def _slow_touch(blocks, keys):
    for k in keys:
        if k in blocks:
            blocks.move_to_end(k)


def _slow_insert(blocks, tier, keys):
    if not tier.enabled or tier.capacity_blocks <= 0:
        return
    for k in keys:
        if k in blocks:
            blocks.move_to_end(k)
        else:
            blocks[k] = None
    while len(blocks) > tier.capacity_blocks:
        blocks.popitem(last=False)


def test_replayed_prompts_keep_lru_order_while_touches_are_deferred():
    cache = only("G4", capacity=6)
    a, b = (1, 2, 3), (11, 12, 13)
    fill(cache, a)
    fill(cache, b)
    for keys in (a, b, a):  # full hits: nothing new, only the order changes (deferred)
        fill(cache, keys)
    assert list(cache.tier("G4").blocks) == [11, 12, 13, 1, 2, 3]
    fill(cache, b)
    fill(cache, (21,))  # a new block: evicts the least recently used, a's first block
    assert list(cache.tier("G4").blocks) == [2, 3, 11, 12, 13, 21]
    assert cache.lookup(a, 3).num_blocks == 0 and cache.lookup(b, 3).num_blocks == 3


def test_a_replayed_prompt_is_known_after_its_commit_unless_something_was_removed():
    cache = only("G4", capacity=6)
    a = (1, 2, 3)
    assert fill(cache, a).num_blocks == 0  # the fill: a miss, then committed
    assert cache.lookup(a, 3).runs == [("G4", 0, 3)]  # known from the commit (no probe needed)
    fill(cache, (11, 12, 13, 14))  # evicts 1: a removal since, so the next lookup probes again
    assert cache.lookup(a, 3).num_blocks == 0
    empty = only("G4", capacity=0)  # an enabled tier that can hold nothing
    fill(empty, a)
    assert empty.lookup(a, 3).num_blocks == 0
