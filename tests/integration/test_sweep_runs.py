"""A real 3-point concurrency sweep on the embedded mock (ci profile, a handful of requests each),
checked against the mock's model and ground truth, then `kvbench report` on the sweep directory."""

import csv
import json
from pathlib import Path

import pytest

from kvbench.results import load_manifest, read_jsonl

pytestmark = pytest.mark.slow

ARGS = [
    "sweep", "throughput", "--mock-profile", "ci",
    "--set", "prompts.count=6", "--set", "prompts.lengths=[20000]", "--set", "load.requests=6",
    "--over", "load.concurrency=1,2,4", "--slo", "ttft_p99_ms=5000",
    "--no-stop-at-saturation", "--quiet",
]  # fmt: skip


def measured_truth(run_dir: Path) -> list[dict]:
    return [
        t
        for t in read_jsonl(run_dir / "mock_ground_truth.jsonl")
        if t["request_id"].split("-")[1] == "cached"
    ]


def test_concurrency_sweep_on_the_mock(kvbench, tmp_path):
    out = tmp_path / "sweep"
    code, stdout, err = kvbench(*ARGS, "--out", str(out))
    assert code == 0, err
    state = json.loads((out / "sweep.json").read_text())
    assert state["status"] == "complete"
    points = state["points"]
    assert [p["assignment"]["load.concurrency"] for p in points] == ["1", "2", "4"]
    prefill = {}
    for p in points:
        assert p["status"] == "complete" and p["exit_code"] == 0
        run_dir = out / p["run_dir"]
        assert run_dir.parent == out / "points" / p["name"]
        c = int(p["assignment"]["load.concurrency"])
        manifest = load_manifest(run_dir)
        assert manifest.load.concurrency == c and manifest.cold_start.verified is True
        truth = measured_truth(run_dir)
        assert len(truth) == 6 and max(t["in_flight_at_receive"] for t in truth) <= c
        # six distinct prompts, each sent once: nothing to reuse, every token computed
        assert all(t["cached_tokens"] == 0 for t in truth)
        prefill[c] = sum(t["prefill_ms"] for t in truth) / len(truth)
        m = p["metrics"]
        assert (m["requests"], m["label"], m["hit_ratio"]) == (6, "cached", 0.0)
        # the point's run as run: its id and its load as its manifest says, not the probe
        run = p["run"]
        assert run["run_id"] == manifest.run_id and run["test"] == "throughput"
        assert run["load"].startswith(f"concurrent, {c} connections kept busy")
        assert run["load"].endswith("; 6 prompt(s) of 20,000 tokens")
        assert run["load_shape"]["concurrency"] == c and run["load_shape"]["prompt_count"] == 6
        assert run["probe_requests"] >= 1 and run["trace"] is None
        assert 0 <= m["good"] <= m["requests"]
        assert m["attainment_ci"][0] <= m["attainment"] <= m["attainment_ci"][1]
    # the mock's GPU is processor-shared: prefills that overlap each take longer, so queueing
    # (not throughput) is what more connections buy on a prefill-bound load
    assert prefill[4] > 1.5 * prefill[1]
    with (out / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["load.concurrency"] for r in rows] == ["1", "2", "4"]
    assert [r["run_id"] for r in rows] == [p["run"]["run_id"] for p in points]
    assert all(r["load"] == p["run"]["load"] for r, p in zip(rows, points, strict=True))
    for png in ("sweep_latency.png", "sweep_goodput.png", "sweep_attainment.png"):
        assert (out / png).stat().st_size > 10_000

    code, stdout, err = kvbench("report", str(out))
    assert code == 0, err
    assert "# Sweep of throughput over load.concurrency" in stdout
    assert all(p["name"] in stdout for p in points)
    assert (out / "summary.md").read_text().count("| 2-load.concurrency=4 |") == 1

    # rerunning into the same directory skips the complete points: no new run directories
    code, _, err = kvbench(*ARGS, "--out", str(out))
    assert code == 0, err
    assert all(len(list((out / "points" / p["name"]).iterdir())) == 1 for p in points)


# laptop's four tiers shrunk 8x (2k, 4k, 8k, 16k tokens of llama-3.1-8b KV) so a 512-token
# prompt's working sets cross every one of them with a few dozen small fillers
SMALL_TIERS = (
    "target.mock_overrides={time_scale: 0.01, tiers.G1.capacity_bytes: 268435456, "
    "tiers.G2.capacity_bytes: 536870912, tiers.G3.capacity_bytes: 1073741824, "
    "tiers.G4.capacity_bytes: 2147483648}"
)


def test_cliff_map_finds_each_tier_where_its_capacity_says(kvbench, tmp_path):
    out = tmp_path / "cliff"
    args = [
        "sweep",
        "ttft",
        "--mock-profile",
        "laptop",
        "--set",
        SMALL_TIERS,
        "--set",
        "prompts.lengths=[512]",
    ]
    args += ["--over", "working_set=1536,3072,6144,12288,20480", "--quiet", "--out", str(out)]
    code, _, err = kvbench(*args)
    assert code == 0, err
    state = json.loads((out / "sweep.json").read_text())
    cliff = state["cliff"]
    assert [(b["tier"], b["tokens"]) for b in cliff["boundaries"]] == [
        ("G1", 2048), ("G2", 4096), ("G3", 8192), ("G4", 16384),
    ]  # fmt: skip
    served = [p["metrics"]["serving_tier"] for p in state["points"]]
    assert served == ["G1", "G2", "G3", "G4", "recompute"]  # the mock's ground truth, point by point
    assert served == [p["metrics"]["predicted_tier"] for p in state["points"]]
    assert all(row["within_one_step"] for row in cliff["table"])
    assert {p["metrics"]["label"] for p in state["points"]} == {"evicted-warm"}  # the warm after fillers
    assert state["points"][-1]["metrics"]["hit_ratio"] == 0.0  # beyond the last tier: recomputed
    assert (out / "sweep_cliff.png").stat().st_size > 10_000
    assert "| G3 -> G4 | 8,192 |" in (out / "summary.md").read_text()


def test_throughput_cliff_map_finds_each_tier_where_its_capacity_says(kvbench, tmp_path):
    """The throughput test's working sets: 3 to 40 distinct 512-token prompts, each sent PASSES
    times shuffled at 4 connections; the repeats' serving tier read from the mock's ground truth."""
    out = tmp_path / "tput-cliff"
    args = ["sweep", "throughput", "--mock-profile", "laptop", "--set", SMALL_TIERS]
    args += ["--set", "prompts.lengths=[512]", "--set", "load.concurrency=4"]
    args += ["--over", "working_set=1536,3072,6144,12288,20480", "--quiet", "--out", str(out)]
    code, _, err = kvbench(*args)
    assert code == 0, err
    state = json.loads((out / "sweep.json").read_text())
    cliff = state["cliff"]
    assert [(b["tier"], b["tokens"]) for b in cliff["boundaries"]] == [
        ("G1", 2048), ("G2", 4096), ("G3", 8192), ("G4", 16384),
    ]  # fmt: skip
    served = [p["metrics"]["serving_tier"] for p in state["points"]]
    assert served == [p["metrics"]["predicted_tier"] for p in state["points"]], served
    assert [row["tier"] for row in cliff["table"]] == ["G1", "G2", "G3", "G4"]
    assert all(row["within_one_step"] for row in cliff["table"]), cliff["table"]
    assert {p["metrics"]["label"] for p in state["points"]} == {"cached"}
    runs = [out / p["run_dir"] for p in state["points"]]
    counts = [
        len({r["prompt_id"] for r in read_jsonl(d / "requests.jsonl") if r["label"] == "cached"})
        for d in runs
    ]
    assert counts == [3, 6, 12, 24, 40]  # ceil(working set / 512) distinct prompts
    assert all(p["metrics"]["ttft_p99_ms"] >= p["metrics"]["ttft_p50_ms"] for p in state["points"])
    first, last = state["points"][0]["metrics"], state["points"][-1]["metrics"]
    assert first["repeats"] > 0 and first["repeat_hit_ratio"] > 0.9  # in G1: every repeat hits
    assert last["repeat_hit_ratio"] < first["repeat_hit_ratio"]  # past G4: some repeats recomputed
    assert (out / "sweep_cliff.png").stat().st_size > 10_000


def test_goodput_search_lands_within_one_step_of_the_modelled_capacity(kvbench, tmp_path):
    """ci's GPU shares prefill between the requests on it: c uncached 20k-token prompts started
    together each see about c prefill times of TTFT. The SLO sits between the model's TTFT at
    the capacity and one connection more, and the search must find that capacity (or a step off)."""
    from kvbench.mock.costs.prediction import predict_closed_loop
    from kvbench.mock.costs.timing import derive_params
    from kvbench.mock.profiles import load_profile

    profile = load_profile("ci")
    params = derive_params(profile)

    def ttft_ms(c: int) -> float:  # the model's mean TTFT at c connections, at ci's time scale
        run = predict_closed_loop(
            params, requests=12, connections=c, prompts=12, prompt_tokens=20000, use_cache=False
        )
        return run.mean_ttft_s * profile.time_scale * 1000

    capacity = 2
    slo = (ttft_ms(capacity) + ttft_ms(capacity + 1)) / 2
    out = tmp_path / "search"
    args = [
        "sweep",
        "throughput",
        "--mock-profile",
        "ci",
        "--set",
        "prompts.count=12",
        "--set",
        "load.requests=12",
    ]
    args += ["--set", "prompts.lengths=[20000]", "--search", "goodput", "--over", "load.concurrency=1..6"]
    args += ["--slo", f"ttft_p99_ms={slo:.1f}", "--attainment", "0.75", "--quiet", "--out", str(out)]
    code, _, err = kvbench(*args)
    assert code == 0, err
    search = json.loads((out / "sweep.json").read_text())["search"]
    assert abs(search["highest_meeting"] - capacity) <= 1, search["note"]
    assert search["lowest_missing"] - search["highest_meeting"] == 1
    best = next(t for t in search["trials"] if t["load"] == search["highest_meeting"])
    assert best["attainment_ci"][0] >= 0.75 or best["verdict"] == "straddles"
    assert (
        f"search: load.concurrency = {search['highest_meeting']:g} meets" in (out / "summary.md").read_text()
    )


def test_a_replay_sweep_records_each_points_trace_and_pace(kvbench, tmp_path):
    """Over a replay's speedup, every point's record is its trace as run (rows, schedule, speedup)
    with its run id, never the 16-token probe the run starts with; summary.md says it per point."""
    trace = tmp_path / "trace.jsonl"
    lengths = [1000, 2000, 1500]
    trace.write_text("".join(
        json.dumps({"timestamp": 10 * i, "input_length": n, "output_length": 8,
                    "hash_ids": [100 * i + b for b in range(-(-n // 512))]}) + "\n"
        for i, n in enumerate(lengths)
    ))  # fmt: skip
    out = tmp_path / "sweep"
    code, _, err = kvbench(
        "sweep", "replay", "--mock-profile", "ci", "--set", f"test.trace.path={trace}",
        "--over", "test.trace.speedup=2,4", "--out", str(out), "--quiet",
    )  # fmt: skip
    assert code == 0, err
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert len(points) == 2
    md = (out / "summary.md").read_text()
    for p, speed in zip(points, (2, 4), strict=True):
        run = p["run"]
        manifest = load_manifest(out / p["run_dir"])
        assert run["run_id"] == manifest.run_id and run["test"] == "replay"
        assert run["load"] == "replay of 3 trace rows, on the trace's timestamps"
        assert f"at {speed}x" in run["pace"] and "mock time scale" in run["pace"]
        assert run["trace"]["rows"] == 3 and run["trace"]["speedup"] == speed
        shape = run["load_shape"]
        assert shape["kind"] == "replay-fixed" and shape["prompt_count"] == 3
        assert (shape["lengths"]["min"], shape["lengths"]["max"]) == (1000, 2000)
        assert p["metrics"]["requests"] == 3  # the trace's rows; the probes are beside them
        assert f"- {p['name']}: run {manifest.run_id} (replay): replay of 3 trace rows" in md
