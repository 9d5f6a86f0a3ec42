"""kvbench.datasets: each format's fields read as its project documents them, detection, and a bad
file as one line `FILE:LINE: field: message` (exit 2)."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from kvbench.datasets import FORMATS, open_dataset
from kvbench.datasets.prompts import dataset_prompts, request_rows
from kvbench.errors import UsageError
from kvbench.load.prompts import SALT_WORDS
from kvbench.scenario.sections import DatasetFormatName

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_scenario_names_every_registered_format() -> None:
    assert set(typing.get_args(DatasetFormatName)) == {"auto", *FORMATS}


@pytest.mark.parametrize(
    ("fixture", "name", "kind"),
    [
        ("custom.jsonl", "custom", "text"),
        ("sharegpt.json", "sharegpt", "text"),
        ("random.json", "random", "lengths"),
        ("prefix_repetition.json", "prefix_repetition", "lengths"),
        ("single_turn.jsonl", "single_turn", "text"),
        ("multi_turn.jsonl", "multi_turn", "text"),
        ("mooncake_hash_ids.jsonl", "mooncake_trace", "lengths"),
        ("mooncake_text.jsonl", "mooncake_trace", "text"),
    ],
)
def test_detected(fixture: str, name: str, kind: str) -> None:
    ds = open_dataset(FIXTURES / fixture)
    assert (ds.format.name, ds.kind) == (name, kind)
    assert open_dataset(FIXTURES / fixture, name).requests == ds.requests  # named: the same


def test_custom_fields() -> None:
    ds = open_dataset(FIXTURES / "custom.jsonl")
    assert [r.output_tokens for r in ds.requests] == [12, 20, None, 8]
    assert ds.requests[0].text == "Name three rivers that cross more than one country."
    assert [r.line for r in ds.requests] == [1, 2, 3, 4]


def test_sharegpt_takes_the_first_two_turns_and_skips_short_entries() -> None:
    ds = open_dataset(FIXTURES / "sharegpt.json")
    assert ds.skipped == 1 and [r.session for r in ds.requests] == ["conv-1", "conv-2", "conv-4"]
    assert ds.requests[1].text == "How long should bread dough rise?"
    assert ds.requests[1].reply is not None and ds.requests[1].reply.startswith("Until it has")
    assert [r.line for r in ds.requests] == [2, 9, 24]  # each entry's own line in the array


def test_random_lengths_as_vllm_draws_them() -> None:
    ds = open_dataset(FIXTURES / "random.json")
    spec = json.loads((FIXTURES / "random.json").read_text())
    n_in, ratio, prefix = spec["random_input_len"], spec["random_range_ratio"], spec["random_prefix_len"]
    assert len(ds.requests) == spec["num_prompts"]
    for r in ds.requests:
        assert r.input_tokens is not None
        assert n_in * (1 - ratio) <= r.input_tokens - prefix <= n_in * (1 + ratio) + 1
        assert ds.block_tokens * len(r.hash_ids) >= r.input_tokens
    heads = {r.hash_ids[: prefix // ds.block_tokens] for r in ds.requests}
    assert len(heads) == 1  # the prefix all of them share
    tails = [r.hash_ids[prefix // ds.block_tokens :] for r in ds.requests]
    assert len({i for t in tails for i in t}) == sum(len(t) for t in tails)  # the rest unique
    assert open_dataset(FIXTURES / "random.json").requests == ds.requests  # seeded


def test_prefix_repetition_groups() -> None:
    ds = open_dataset(FIXTURES / "prefix_repetition.json")
    assert len(ds.requests) == 8 and {r.input_tokens for r in ds.requests} == {96}
    assert ds.block_tokens == 32  # gcd(64, 32): the prefix is whole ids
    by_group: dict[str | None, set[tuple[int, ...]]] = {}
    for r in ds.requests:
        by_group.setdefault(r.session, set()).add(r.hash_ids[:2])
    assert len(by_group) == 2 and all(len(v) == 1 for v in by_group.values())


def test_multi_turn_history_and_system_prompt() -> None:
    ds = open_dataset(FIXTURES / "multi_turn.jsonl")
    a = [r for r in ds.requests if r.session == "user-a"]
    assert [r.turn for r in a] == [1, 2]  # the system turn is no request of its own
    assert a[0].text == "Answer briefly.\nWhich is larger, a lake or a pond?"
    assert a[1].text is not None and a[0].text is not None and a[1].text.startswith(a[0].text)
    assert [r.output_tokens for r in a] == [8, 12]


def test_mooncake_short_hash_ids_get_fresh_blocks() -> None:
    ds = open_dataset(FIXTURES / "mooncake_hash_ids.jsonl")
    last = ds.requests[-1]  # input_length 700 and no hash_ids: a unique prompt of 2 blocks
    assert last.input_tokens == 700 and len(last.hash_ids) == 2 and min(last.hash_ids) >= 2**62
    assert ds.requests[0].hash_ids == (10, 11) and ds.requests[0].timestamp_ms == 0


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "a.jsonl",
            '{"prompt": "hi"}\n{"prompt": ""}\n',
            "a.jsonl:2: prompt: must be non-empty text, got ''",
        ),
        (
            "b.jsonl",
            '{"prompt": "hi", "output_tokens": -3}\n',
            "b.jsonl:1: output_tokens: must be >= 0, got -3",
        ),
        ("c.jsonl", '{"prompt": "hi"}\nnot json\n', "c.jsonl:2: row: not JSON (Expecting value at column 1)"),
        (
            "d.json",
            '[\n {"conversations": [{"value": "x"}, {"value": "y"}]},\n {"conversations": "z"}\n]',
            "d.json:3: conversations: must be a list of turns, got str",
        ),
        (
            "e.json",
            '{"random_input_len": 10, "random_input_lne": 3}',
            "e.json:1: random_input_lne: unknown setting",
        ),
        ("f.jsonl", '{"turns": [{"text": "a"}, {"txt": "b"}]}\n', "f.jsonl:1: turns[1].text: missing"),
        (
            "g.jsonl",
            '{"input_length": 600, "hash_ids": [1, 2, 3]}\n',
            "g.jsonl:1: hash_ids: 3 ids but input_length 600 at 512 tokens per block allows at most 2",
        ),
        ("h.jsonl", '{"colour": "red"}\n', "h.jsonl:1: format: no dataset format matches the first entry"),
        (
            "i.json",
            '{"prefix_repetition_num_prefixes": 4, "num_prompts": 2}',
            "i.json:1: num_prompts: 2 is fewer than prefix_repetition_num_prefixes 4",
        ),
    ],
)
def test_bad_file_is_one_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(UsageError) as err:
        open_dataset(path)
    assert str(err.value).startswith(f"{tmp_path}/{message}")
    assert "\n" not in str(err.value) and err.value.exit_code == 2


def test_named_format_that_does_not_fit_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "x.jsonl", '{"text": "hello"}\n')
    with pytest.raises(UsageError, match=r"x.jsonl:1: prompt: missing"):
        open_dataset(path, "custom")


def test_limit_keeps_the_first_requests() -> None:
    ds = open_dataset(FIXTURES / "custom.jsonl", limit=2)
    assert [r.line for r in ds.requests] == [1, 2]


async def test_lengths_prompts_are_token_exact_with_the_salt_in_front() -> None:
    ds = open_dataset(FIXTURES / "mooncake_hash_ids.jsonl")
    prompts = await dataset_prompts(ds, counter=None, salted=True, seed=0)
    for p, r in zip(prompts, ds.requests, strict=True):
        assert len(p.with_salt(" ".join(["salt"] * SALT_WORDS)).split()) == r.input_tokens
    # shared ids, shared text: rows 0 and 1 share both ids (all 600 of row 0 in the engine's blocks)
    assert prompts[1].body.startswith(prompts[0].body)
    rows = request_rows(ds, prompts, [0, 1, 2, 3, 4, 0], engine_block=16)
    assert [r.expected_cached_tokens for r in rows] == [0, 900, 0, 512, 0, 600]  # the ideal: every id
    assert [r.engine_expected_tokens for r in rows] == [0, 592, 0, 512, 0, 592]


async def test_text_prompts_count_the_salt_and_keep_the_text() -> None:
    ds = open_dataset(FIXTURES / "single_turn.jsonl")

    async def words(texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    prompts = await dataset_prompts(ds, counter=words, salted=True, seed=0)
    assert prompts[0].body == "What is a prefix cache?"
    assert prompts[0].actual_tokens == 5 + SALT_WORDS and prompts[0].count_source == "server"
    assert prompts[2].body == "Summarise why a cold start must be verified."  # `texts` joined
    assert [p.output_tokens for p in prompts] == [10, 16, None, 5]
    assert all(r.expected_blocks is None for r in request_rows(ds, prompts, [0, 1, 2, 3], 16))
