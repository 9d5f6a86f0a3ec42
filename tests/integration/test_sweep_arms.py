"""The offload-on-but-idle arm on the embedded mock: each point run on arm A (the scenario as
given, every tier caching) then arm B (G2-G4 not caching). Judged on the mock's ground truth and
its model's charge, not wall clock: with the working set inside G1 the arms cost the same, beyond
it only arm A finds the prompt again."""

import json
from pathlib import Path

import pytest

from kvbench.results import load_manifest, read_jsonl

pytestmark = pytest.mark.slow

# laptop's tiers shrunk 8x: G1 holds 2k tokens of llama-3.1-8b KV, G2 4k, G3 8k, G4 16k
SMALL_TIERS = (
    "target.mock_overrides={time_scale: 0.01, tiers.G1.capacity_bytes: 268435456, "
    "tiers.G2.capacity_bytes: 536870912, tiers.G3.capacity_bytes: 1073741824, "
    "tiers.G4.capacity_bytes: 2147483648}"
)
ARGS = [
    "sweep", "ttft", "--mock-profile", "laptop", "--set", SMALL_TIERS, "--set", "prompts.lengths=[512]",
    "--over", "working_set=1536,6144", "--baseline-offload-off", "--quiet",
]  # fmt: skip


def warm_truth(run_dir: Path) -> dict:
    """The mock's ground truth of the measured warm request (the one after the fillers)."""
    ids = {r["request_id"] for r in read_jsonl(run_dir / "requests.jsonl") if r["label"] == "evicted-warm"}
    (truth,) = [t for t in read_jsonl(run_dir / "mock_ground_truth.jsonl") if t["request_id"] in ids]
    return truth


def test_the_idle_arm_costs_nothing_inside_g1_and_loses_beyond_it(kvbench, tmp_path):
    out = tmp_path / "arms"
    code, _, err = kvbench(*ARGS, "--out", str(out))
    assert code == 0, err
    state = json.loads((out / "sweep.json").read_text())
    points = state["points"]
    assert [(p["assignment"]["working_set"], p["arm"]) for p in points] == [
        ("1536", "main"), ("1536", "baseline"), ("6144", "main"), ("6144", "baseline"),
    ]  # fmt: skip
    runs = [out / p["run_dir"] for p in points]
    starts = [load_manifest(d).started_at for d in runs]
    assert starts == sorted(starts)  # interleaved: A then B, point by point
    for p, run_dir in zip(points, runs, strict=True):
        scn_text = (run_dir / "scenario.yaml").read_text()
        off = "tiers.G2.enabled: false" in scn_text and "tiers.G4.enabled: false" in scn_text
        assert off == (p["arm"] == "baseline"), p["name"]
        assert "time_scale: 0.01" in scn_text  # arm B keeps the point's own overrides
    truth = {
        (p["assignment"]["working_set"], p["arm"]): warm_truth(d) for p, d in zip(points, runs, strict=True)
    }
    # inside G1 both arms find the whole cacheable prompt on the GPU: the same modelled charge
    for arm in ("main", "baseline"):
        t = truth[("1536", arm)]
        assert t["cached_tokens"] == 496 and t["tokens_from_tier"]["G1"] == 496
    idle = points[1]["metrics"]
    assert points[0]["metrics"]["modelled_ttft_p50_ms"] == pytest.approx(idle["modelled_ttft_p50_ms"])
    assert idle["overhead_modelled_ttft_p50"] == pytest.approx(0.0, abs=1e-9)
    # beyond G1: arm A onboards the prompt from a lower tier, arm B recomputes it, and pays for it
    a, b = truth[("6144", "main")], truth[("6144", "baseline")]
    assert a["cached_tokens"] == 496 and a["tokens_from_tier"]["G1"] == 0
    assert b["cached_tokens"] == 0 and b["tokens_computed"] == 512
    beyond = points[3]["metrics"]
    assert points[2]["metrics"]["modelled_ttft_p50_ms"] < beyond["modelled_ttft_p50_ms"]
    assert beyond["overhead_modelled_ttft_p50"] < -0.5
    md = (out / "summary.md").read_text()
    assert "## Offload on (A) vs off (B)" in md and "G2-G4 not caching" in md
    assert md.count("| 1-working_set=6144 | 6144 |") == 2  # the summary row and the arms row
    with (out / "summary.csv").open() as f:
        header = f.readline()
    assert "arm" in header.split(",") and "overhead_modelled_ttft_p50" in header
    assert (out / "sweep_latency.png").stat().st_size > 10_000
    # the cliff map reads arm A only: arm B's points carry no serving tier of their own
    assert [p["metrics"]["serving_tier"] for p in points if p["arm"] == "main"] == ["G1", "G3"]

    code, _, err = kvbench(*ARGS, "--out", str(out))  # a rerun skips both arms' complete points
    assert code == 0, err
    assert all(len(list((out / "points" / p["name"]).iterdir())) == 1 for p in points)


def test_a_throughput_run_inside_g1_leaves_offload_idle(kvbench, tmp_path):
    """Two 2k-token prompts, twelve requests on one connection (two connections would race a
    prompt's second request against its first one's commit): everything fits in laptop's G1 (16k
    tokens), so arm A never reads from G2-G4, both arms' cache outcomes and modelled charges
    agree, and the overhead's interval (twelve requests a side) holds zero."""
    out = tmp_path / "idle"
    args = [
        "sweep",
        "throughput",
        "--mock-profile",
        "laptop",
        "--set",
        "target.mock_overrides={time_scale: 0.01}",
    ]
    args += ["--set", "prompts.count=2", "--set", "prompts.lengths=[2000]", "--set", "load.requests=12"]
    args += ["--over", "load.concurrency=1", "--baseline-offload-off", "--quiet", "--out", str(out)]
    code, _, err = kvbench(*args)
    assert code == 0, err
    state = json.loads((out / "sweep.json").read_text())
    a, b = state["points"]
    label = a["metrics"]["label"]
    cached = {}
    for p in (a, b):
        run_dir = out / p["run_dir"]
        ids = {r["request_id"] for r in read_jsonl(run_dir / "requests.jsonl") if r["label"] == label}
        truth = [t for t in read_jsonl(run_dir / "mock_ground_truth.jsonl") if t["request_id"] in ids]
        assert len(truth) == 12
        assert all(sum(t["bytes_from_tier"].values()) == 0 for t in truth)  # nothing onboarded
        cached[p["arm"]] = sorted(t["cached_tokens"] for t in truth)
    assert cached["main"] == cached["baseline"] and any(cached["main"])
    m = b["metrics"]
    lo, hi = m["overhead_modelled_ttft_p50_ci"]
    assert m["overhead_modelled_ttft_p50"] == pytest.approx(0.0, abs=1e-9) and lo <= 0 <= hi
    assert m["overhead_ttft_p50_ci"] is not None  # the measured one has an interval too (not asserted on)
