"""trace synth: seeded and deterministic, structurally a prefix trace, and its controls do what they say."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from kvbench.traces import open_trace
from kvbench.traces.analyze import analyze_trace, expected_reusable_blocks
from kvbench.traces.controls import SynthControls
from kvbench.traces.synth import synthesize, write_trace

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "scenarios" / "traces"

SMALL = {
    "rows": 400,
    "seed": 5,
    "system_prompt": {"tokens": 700, "variants": 2},
    "documents": {"count": 30, "mean_tokens": 900},
    "sessions": {"share": 0.5, "think_time_s": 3},
}


def _controls(**over: object) -> SynthControls:
    return SynthControls.model_validate({**SMALL, **over})


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.jsonl", "a.jsonl.gz", "b.jsonl.gz"):
        write_trace(synthesize(_controls()), tmp_path / name, "mooncake")
    write_trace(synthesize(_controls(seed=6)), tmp_path / "c.jsonl", "mooncake")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()
    assert list(open_trace(tmp_path / "a.jsonl.gz")) == list(open_trace(tmp_path / "a.jsonl"))


@pytest.mark.parametrize("name", ["ci", "mooncake-like"])
def test_shipped_traces_are_what_their_controls_make(name: str, tmp_path: Path) -> None:
    shipped = next(p for p in SHIPPED.iterdir() if p.name.startswith(f"{name}.jsonl"))
    controls = SynthControls.model_validate(yaml.safe_load((SHIPPED / f"{name}.synth.yaml").read_text()))
    out = tmp_path / shipped.name
    write_trace(synthesize(controls), out, controls.format)
    assert out.read_bytes() == shipped.read_bytes()
    assert shipped.stat().st_size < 1_000_000


def test_mooncake_like_lands_near_the_published_statistics() -> None:
    trace = open_trace(SHIPPED / "mooncake-like.jsonl.gz")
    a = analyze_trace(trace, path="m", format=trace.format, block_tokens=trace.block_tokens)
    # the Mooncake paper's trace: mean input 7,590 tokens, mean output 182, ~50% of blocks reusable
    assert a.input_tokens / a.rows == pytest.approx(7590, rel=0.05)
    assert a.output_tokens / a.rows == pytest.approx(182, rel=0.05)
    assert a.ideal_block_hit_rate == pytest.approx(0.50, abs=0.04)


@pytest.mark.parametrize("fmt,block", [("mooncake", 512), ("bailian", 16), ("weka", 64)])
def test_every_format_reads_back_with_one_id_per_block(fmt: str, block: int, tmp_path: Path) -> None:
    path = tmp_path / f"t.{fmt}.jsonl"
    write_trace(synthesize(_controls(format=fmt)), path, fmt)
    trace = open_trace(path, require_monotonic=True)
    assert (trace.format, trace.block_tokens) == (fmt, block)
    rows = list(trace)
    assert len(rows) == 400
    assert all(len(r.hash_ids) == math.ceil(r.input_length / block) for r in rows)


def test_a_later_turn_extends_its_parent_prompt(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    write_trace(synthesize(_controls(format="bailian")), path, "bailian")
    rows = list(open_trace(path))
    by_id = {r.request_id: r for r in rows}
    later = [r for r in rows if r.parent is not None]
    assert len(later) > 50
    for r in later:
        parent = by_id[r.parent]
        assert r.session == parent.session and r.turn == parent.turn + 1
        assert r.timestamp_ms >= parent.timestamp_ms
        # the parent's whole blocks (its last, partial one is extended by its answer) lead this prompt
        whole = parent.input_length // 16
        assert r.hash_ids[:whole] == parent.hash_ids[:whole]
        assert r.input_length > parent.input_length + parent.output_length


def test_more_popular_documents_and_a_system_prompt_raise_the_ideal_hit_rate() -> None:
    def ideal(**over: object) -> float:
        rows = list(synthesize(_controls(sessions={"share": 0.0}, **over)))
        return sum(expected_reusable_blocks(rows)) / sum(len(r.hash_ids) for r in rows)

    flat = ideal(documents={"count": 300, "mean_tokens": 2000, "share": 1.0, "zipf_s": 0.0})
    skewed = ideal(documents={"count": 300, "mean_tokens": 2000, "share": 1.0, "zipf_s": 1.5})
    assert skewed > flat + 0.1
    none = ideal(system_prompt={"tokens": 0}, documents={"count": 0})
    assert none == 0.0  # nothing is shared: every user message is new


def test_gamma_arrivals_have_the_asked_burstiness() -> None:
    rows = list(
        synthesize(
            _controls(rows=6000, arrival={"rate_per_s": 10, "process": "gamma", "cv": 2.0}, sessions={})
        )
    )
    gaps = np.diff([r.timestamp_ms for r in rows])
    assert gaps.mean() == pytest.approx(100.0, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.15)


def test_rows_and_duration_bound_the_trace() -> None:
    rows = list(synthesize(_controls(rows=10_000, duration_s=20.0, arrival={"rate_per_s": 5})))
    assert 0 < len(rows) < 10_000
    assert max(r.timestamp_ms for r in rows) <= 20_000.0
    capped = list(synthesize(_controls(max_input_tokens=1000)))
    assert max(r.input_length for r in capped) == 1000


@pytest.mark.parametrize(
    "bad",
    [
        {"rows": 0},
        {"documents": {"zipf": 1.0}},
        {"arrival": {"cv": 2.0}},
        {"format": "csv"},
        {"sessions": {"mean_turns": 1}},
    ],
)
def test_controls_are_strict(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SynthControls.model_validate(bad)
