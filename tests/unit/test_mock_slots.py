"""llama.cpp's slot cache (kvbench.mock.costs.slots): one prompt per slot, moved through a RAM cache."""

from __future__ import annotations

import pytest

from kvbench.mock.costs.slots import SlotCache, common_prefix


def prompt(tag: int, n: int = 100, shared: int = 2) -> tuple[int, ...]:
    """n block keys: `shared` keys every prompt starts with (a BOS and a salt), then its own."""
    return tuple(range(shared)) + tuple(tag * 10_000 + i for i in range(n - shared))


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [((), (1,), 0), ((1, 2, 3), (1, 2, 3), 3), ((1, 2, 3), (1, 2), 2), ((1, 2, 3), (1, 9, 3), 1),
     (tuple(range(1000)), (*range(999), 5), 999), ((7,), (8,), 0)],
)  # fmt: skip
def test_common_prefix(a: tuple[int, ...], b: tuple[int, ...], want: int) -> None:
    assert common_prefix(a, b) == want


def run(cache: SlotCache, keys: tuple[int, ...]) -> tuple[int, int]:
    """One request start to end: its slot and its hit in blocks."""
    hit = cache.acquire(keys, len(keys) - 1)
    cache.hold(hit.slot, keys)
    cache.release(hit.slot)
    return hit.slot, hit.blocks


def test_a_prompt_comes_back_to_the_slot_that_holds_it() -> None:
    cache = SlotCache(slots=2, ram_blocks=0)
    s_a, hit_a = run(cache, prompt(1))
    s_b, _ = run(cache, prompt(2))
    assert hit_a == 0  # an empty slot
    assert s_a != s_b  # the least recently used slot takes the new prompt
    assert run(cache, prompt(1)) == (s_a, 99)  # the last block is always computed


def test_a_second_request_for_a_prompt_whose_slot_is_busy_finds_it_nowhere() -> None:
    cache = SlotCache(slots=2, ram_blocks=None)
    run(cache, prompt(1))
    run(cache, prompt(2))
    busy = cache.acquire(prompt(1), 99)
    assert busy.blocks == 99
    other = cache.acquire(prompt(1), 99)  # the prompt's only copy is in a running slot
    assert other.slot != busy.slot and other.blocks == 2  # prompt 2's slot: the shared start only


def test_the_ram_cache_moves_prompts_in_and_out_of_slots() -> None:
    cache = SlotCache(slots=1, ram_blocks=None)
    run(cache, prompt(1))
    hit = cache.acquire(prompt(2), 99)  # slot 0 saves prompt 1 to RAM, finds nothing for prompt 2
    assert (hit.saved_blocks, hit.restored_blocks, hit.blocks) == (100, 0, 2)
    cache.hold(hit.slot, prompt(2))
    cache.release(hit.slot)
    back = cache.acquire(prompt(1), 99)  # prompt 2 saved, prompt 1 moved back in
    assert (back.saved_blocks, back.restored_blocks, back.blocks, back.tier) == (100, 100, 99, "G2")
    assert cache.ram_entries == 1  # prompt 1 left the RAM cache: it is in the slot now


def test_without_a_ram_cache_a_prompt_that_lost_its_slot_is_computed_again() -> None:
    cache = SlotCache(slots=1, ram_blocks=0)
    run(cache, prompt(1))
    run(cache, prompt(2))
    assert run(cache, prompt(1))[1] == 2


def test_a_full_ram_cache_drops_its_oldest_prompt() -> None:
    cache = SlotCache(slots=1, ram_blocks=250)  # room for two 100-block prompts
    for tag in (1, 2, 3, 4):
        run(cache, prompt(tag))
    assert cache.ram_entries == 2  # 1, 2, 3 were saved in turn; 1 went when 3 came
    assert run(cache, prompt(1))[1] == 2  # saving 4 made room by dropping 2: [3, 4]
    assert run(cache, prompt(4))[1] == 99  # saving 1 drops 3 (the save comes before the load): [4, 1]


def test_a_similar_prompt_reuses_the_slot_and_keeps_the_shared_part() -> None:
    cache = SlotCache(slots=2, ram_blocks=0)
    base = prompt(1)
    s, _ = run(cache, base)
    run(cache, prompt(2))
    longer = base + tuple(range(50_000, 50_020))  # a conversation's next turn: the last one's prefix
    assert run(cache, longer) == (s, 100)


def test_admission_must_bound_requests_by_slots() -> None:
    cache = SlotCache(slots=1, ram_blocks=0)
    cache.acquire(prompt(1), 99)
    with pytest.raises(RuntimeError, match="no idle slot"):
        cache.acquire(prompt(2), 99)


def test_reset_forgets_every_idle_prompt() -> None:
    cache = SlotCache(slots=1, ram_blocks=None)
    run(cache, prompt(1))
    run(cache, prompt(2))
    cache.reset()
    assert cache.ram_entries == 0
    assert run(cache, prompt(2))[1] == 0
