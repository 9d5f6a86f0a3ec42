"""The TTFT test's plan (kvbench.run.ttft) against a fake prefix cache: one cold request and the
warm repeats per prompt, eviction by filler prompts, tier reset or a slot file, the step table.

The fake client models a cache by whole text: a text it has seen is cached in full, and its first
token costs one microsecond per uncached word, so every figure the plan records is computed here
from the prompts it built, never told to the code."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from kvbench.client import ClientConfig, RequestRecord
from kvbench.engines.adapters import TierOperationFailed, TierUnsupported
from kvbench.errors import KvbenchError
from kvbench.load.prompts import Prompt, build_prompts
from kvbench.results import read_jsonl, read_manifest
from kvbench.results.schema import Label
from kvbench.run.context import Run, RunOptions
from kvbench.run.preflight.target import TargetInfo
from kvbench.run.runner import start_manifest
from kvbench.run.ttft import _ttft_row, evict, pin_slot, run_ttft, ttft_table
from kvbench.scenario import Scenario

NS_PER_WORD = 1_000


class CacheClient:
    """A server whose cache holds every text it answered; TTFT grows with the uncached words."""

    def __init__(self) -> None:
        self.cfg = ClientConfig(base_url="http://fake", model="m")
        self.seen: set[str] = set()
        self.prompts: list[str] = []
        self.clock = 0

    def now(self) -> int:
        return self.clock

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        text = json.loads(body)["prompt"]
        words = len(text.split())
        cached = words if text in self.seen else 0
        self.seen.add(text)
        self.prompts.append(text)
        self.clock += 10_000_000
        rec.sent_ns = self.clock
        rec.first_token_ns = self.clock + NS_PER_WORD * (words - cached + 1)
        rec.end_ns = rec.first_token_ns + 1
        rec.cached_tokens, rec.prompt_tokens_server = cached, words
        rec.output_text = f"answer to {len(text)} chars"
        return rec


class Adapter:
    engine = "fake"
    can_reset = False
    transfer_counters = ()
    hit_counters = ()

    def __init__(self, evict_error: Exception | None = None, trip: dict[str, Any] | None = None) -> None:
        self.evict_error, self.trip, self.evictions = evict_error, trip, 0

    async def evict_fast_tiers(self, http: Any) -> dict[str, Any]:
        self.evictions += 1
        if self.evict_error is not None:
            raise self.evict_error
        return {}

    async def disk_round_trip(self, http: Any, slot: int, filename: str) -> dict[str, Any]:
        if self.evict_error is not None:
            raise self.evict_error
        assert slot == 0  # the slot pin_slot pins every request to
        return dict(self.trip or {})

    def pin_request(self, slot: int) -> dict[str, Any]:
        return {"id_slot": slot}


def scenario(lengths: list[int], reps: int = 1, **test: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "ttft-cov",
            "test": {"kind": "ttft", **test},
            "prompts": {"lengths": lengths, "count": len(lengths)},
            "load": {"kind": "sequential"},
            "telemetry": {"metrics": "off"},
            "cache": {"reset": "never", "verify": "off"},
            "repetitions": reps,
        }
    )


def make_run(tmp_path: Path, scn: Scenario, adapter: Adapter | None = None) -> tuple[Run, CacheClient]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    target = TargetInfo(kind="server", base_url="http://fake", model="m", engine="generic", api="completions")
    conn = types.SimpleNamespace(run_path=tmp_path, run_id="20261206T000000Z-ttft-abc123", target=target)
    rd = start_manifest(scn, RunOptions(quiet=True), conn, 0)  # type: ignore[arg-type]
    client = CacheClient()
    run = Run(scn, RunOptions(quiet=True), rd, target, None, client, adapter or Adapter(), 0)  # type: ignore[arg-type]
    return run, client


async def prompts_for(scn: Scenario) -> list[Prompt]:
    return await build_prompts(list(scn.prompts.lengths), seed=scn.prompts.seed)  # type: ignore[arg-type]


async def test_each_prompt_is_one_cold_then_the_warm_repeats_with_the_cold_ones_verified(tmp_path) -> None:
    scn = scenario([30, 90], reps=2, warm_repeats=2)
    run, client = make_run(tmp_path, scn)
    prompts = await prompts_for(scn)
    await run_ttft(run, prompts)
    run.rd.close()
    rows = read_jsonl(tmp_path / "requests.jsonl")
    assert len(rows) == 2 * len(prompts) * 3
    for rep in (0, 1):
        labels = [(r["prompt_id"], r["label"]) for r in rows if r["repetition"] == rep]
        assert labels == [(0, "cold"), (0, "warm"), (0, "warm"), (1, "cold"), (1, "warm"), (1, "warm")]
    # every rep salts afresh: no two cold texts alike, so none was cached
    colds = [r for r in rows if r["label"] == "cold"]
    assert all(r["cached_tokens"] == 0 for r in colds) and len(set(client.prompts)) == 4
    steps = read_manifest(tmp_path)["ttft_steps"]
    assert [(s["rep"], s["prompt_id"], s["tokens"]) for s in steps] == [
        (0, 0, 30),
        (0, 1, 90),
        (1, 0, 30),
        (1, 1, 90),
    ]
    for s, p in zip(steps, prompts * 2, strict=True):
        words = len(client.prompts[0].split()) if p.prompt_id == 0 else len(client.prompts[3].split())
        assert s["cold_ttft_s"] == pytest.approx(NS_PER_WORD * (words + 1) / 1e9)
        assert s["warm_ttft_s"] == pytest.approx(NS_PER_WORD / 1e9)
        assert s["speedup"] == pytest.approx(words + 1)
        assert s["verified"] is True and s["outputs_match"] is True and s["reset"] is None
        assert s["warm_cached_tokens"] == words
    phases = read_manifest(tmp_path)["phases"]
    assert [(p["name"], p["repetition"], p["requests"], p["cold_verified"]) for p in phases] == [
        ("ttft", 0, 6, True),
        ("ttft", 1, 6, True),
    ]
    assert run.summary_lines[0].split()[:3] == ["tokens", "cold", "TTFT"] and len(run.summary_lines) == 5


async def test_filler_eviction_sends_enough_filler_prompts_to_cover_its_tokens(tmp_path) -> None:
    scn = scenario([40], eviction="filler", filler_tokens=130)
    run, client = make_run(tmp_path, scn)
    await run_ttft(run, await prompts_for(scn))
    run.rd.close()
    labels = [r["label"] for r in read_jsonl(tmp_path / "requests.jsonl")]
    fillers = -(-130 // 40)  # the fillers are as long as the prompt and cover filler_tokens
    assert labels == ["cold", *["filler"] * fillers, str(Label.EVICTED_WARM)]
    (step,) = read_manifest(tmp_path)["ttft_steps"]
    assert step["eviction"] == "filler" and step["filler_requests"] == fillers
    # each filler is salted on its own: none repeats the measured prompt or another filler
    assert len(set(client.prompts[1:-1])) == fillers and client.prompts[0] not in client.prompts[1:-1]


async def test_filler_eviction_without_a_size_sends_twice_the_prompt(tmp_path) -> None:
    scn = scenario([25], eviction="filler")
    run, _ = make_run(tmp_path, scn)
    prompt = (await prompts_for(scn))[0]
    out = await evict(run, 0, prompt)
    assert out == {"eviction": "filler", "filler_requests": 2}


async def test_tier_reset_evicts_once_per_prompt_and_a_refusal_names_the_field(tmp_path) -> None:
    scn = scenario([20, 20], eviction="tier_reset")
    adapter = Adapter()
    run, _ = make_run(tmp_path, scn, adapter)
    await run_ttft(run, await prompts_for(scn))
    assert adapter.evictions == 2
    assert [s.eviction for s in run.rd.manifest.ttft_steps] == ["tier_reset", "tier_reset"]  # type: ignore[union-attr]
    for exc in (TierUnsupported("no fast tiers here"), TierOperationFailed("answered 500")):
        run2, _ = make_run(tmp_path / type(exc).__name__, scn, Adapter(evict_error=exc))
        with pytest.raises(KvbenchError, match=r"^cache\.eviction=tier_reset: ") as info:
            await evict(run2, 0, Prompt(0, 20, "a b"))
        assert str(exc) in str(info.value) and "\n" not in str(info.value)


async def test_slot_file_names_the_file_by_run_and_prompt_and_keeps_the_trip(tmp_path) -> None:
    scn = scenario([20], eviction="slot_file")
    trip = {"n_saved": 21, "restore_ms": 3.5, "restore_client_ms": 4.0}
    run, _ = make_run(tmp_path, scn, Adapter(trip=trip))
    out = await evict(run, 0, Prompt(7, 20, "a b"))
    assert out == {"eviction": "slot_file", "slot_file": f"kvbench-{run.rd.run_id}-7.bin", **trip}
    refused = make_run(tmp_path / "u", scn, Adapter(evict_error=TierUnsupported("x")))[0]
    with pytest.raises(KvbenchError, match=r"slot_file: needs llama\.cpp.*engine is generic"):
        await evict(refused, 0, Prompt(0, 20, "a"))
    failed = make_run(tmp_path / "f", scn, Adapter(evict_error=TierOperationFailed("403")))[0]
    with pytest.raises(KvbenchError, match=r"403 \(start llama-server with --slot-save-path\)"):
        await evict(failed, 0, Prompt(0, 20, "a"))


def test_pin_slot_only_for_the_slot_file_eviction() -> None:
    assert pin_slot(scenario([20], eviction="slot_file"), Adapter()) == {"id_slot": 0}  # type: ignore[arg-type]
    assert pin_slot(scenario([20], eviction="filler"), Adapter()) == {}  # type: ignore[arg-type]


def rec(first_ms: float | None, text: str = "x", ok: bool = True, cached: int | None = 0) -> RequestRecord:
    r = RequestRecord(request_id="r", sent_ns=1_000_000, cached_tokens=cached, output_text=text)
    r.first_token_ns = None if first_ms is None else 1_000_000 + int(first_ms * 1e6)
    if not ok:
        r.fail("http_503", "busy")
    return r


def test_a_step_takes_the_best_warm_and_says_when_outputs_differ() -> None:
    p = Prompt(3, 500, "body")
    row = _ttft_row(p, rec(80.0), [rec(20.0, cached=499), rec(10.0, "y", cached=500)], True, True)
    assert row["warm_ttft_s"] == pytest.approx(0.010) and row["speedup"] == pytest.approx(8.0)
    assert row["outputs_match"] is False and row["warm_cached_tokens"] == 500
    failed = _ttft_row(p, rec(80.0), [rec(None, ok=False)], None, None)
    assert failed["warm_ttft_s"] is None and failed["speedup"] is None and failed["outputs_match"] is None
    no_warm = _ttft_row(p, rec(80.0), [], True, None)
    assert no_warm["warm_cached_tokens"] is None and no_warm["outputs_match"] is None


def test_the_table_adds_the_restore_column_only_for_a_disk_round_trip() -> None:
    base = {"tokens": 512, "cold_ttft_s": 0.5, "warm_ttft_s": 0.05, "speedup": 10.0}
    row = {**base, "warm_cached_tokens": 496, "verified": False, "outputs_match": None}
    head, line = ttft_table([row])
    assert "warm+restore" not in head and line.split() == ["512", "0.500", "0.050", "10.0x", "496", "NO", "-"]
    disk = {**row, "verified": None, "outputs_match": True, "restore_client_ms": 150.0}
    head, line = ttft_table([disk])
    assert head.endswith("warm+restore s") and line.split()[-3:] == ["unknown", "yes", "0.200"]
    empty = {**disk, "cold_ttft_s": None, "warm_ttft_s": None, "speedup": None, "warm_cached_tokens": None}
    assert ttft_table([empty])[1].split()[:5] == ["512", "-", "-", "-x", "-"]
