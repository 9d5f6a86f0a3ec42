"""The hit-rate dial on the embedded mock: 0.25 / 0.5 / 0.75 land within tolerance of what was asked,
by the mock's ground truth, usage and /metrics; a dial that cannot be met is flagged; and the dial
sweeps (`kvbench sweep throughput --over prompts.reuse.hit_rate=...`)."""

import json
from pathlib import Path

import pytest

from kvbench.results import load_manifest, read_jsonl

pytestmark = pytest.mark.slow

SMALL = [
    "--mock-profile", "ci", "--set", "prompts.count=4", "--set", "prompts.lengths=[1500,2600]",
    "--set", "load.requests=8", "--set", "load.concurrency=2", "--quiet",
]  # fmt: skip
BLOCK = 16  # the ci profile's block_tokens


def only_run(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def cached_truth(run_dir: Path) -> list[dict]:
    return [
        t
        for t in read_jsonl(run_dir / "mock_ground_truth.jsonl")
        if t["request_id"].split("-")[1] == "cached"
    ]


@pytest.mark.parametrize("hit_rate", [0.25, 0.5, 0.75])
def test_the_dial_hits_what_was_asked_within_tolerance(kvbench, tmp_path, hit_rate):
    code, _, err = kvbench(
        "run",
        "throughput",
        *SMALL,
        "--set",
        f"prompts.reuse.hit_rate={hit_rate}",
        "--output-dir",
        str(tmp_path),
    )
    assert code == 0, err
    run_dir = only_run(tmp_path)
    phases = {p.name: p for p in load_manifest(run_dir).phases}
    assert phases["prime"].requests == 4 and phases["cached"].requests == 8
    check = phases["cached"].hit_rate
    assert check is not None and check["requested"] == hit_rate and check["block_tokens"] == BLOCK
    # the mock's own record of every measured request: the primed prefix in whole blocks, no more
    truth = cached_truth(run_dir)
    assert len(truth) == 8
    for t in truth:
        n = t["prompt_tokens"]
        assert t["cached_tokens"] == (round(hit_rate * n) // BLOCK) * BLOCK
    true_ratio = sum(t["cached_tokens"] for t in truth) / sum(t["prompt_tokens"] for t in truth)
    assert check["measured_usage"] == pytest.approx(true_ratio, abs=1e-4)
    assert check["measured_metrics"] == pytest.approx(true_ratio, abs=1e-4)
    assert check["expected"] == pytest.approx(true_ratio, abs=1e-4)
    assert abs(check["measured_usage"] - hit_rate) <= check["tolerance"]
    assert check["hit_rate_off"] is False and check["requests_off"] == 0


def test_a_dial_without_its_prime_is_flagged_off(kvbench, tmp_path):
    # no prime and every prompt sent once: nothing can hit, so the measured ratio misses the expected
    args = [
        "--set",
        "prompts.reuse.hit_rate=0.5",
        "--set",
        "prompts.reuse.prime=false",
        "--set",
        "load.requests=4",
    ]
    code, _, err = kvbench("run", "throughput", *SMALL, *args, "--output-dir", str(tmp_path))
    assert code == 0, err
    check = {p.name: p for p in load_manifest(only_run(tmp_path)).phases}["cached"].hit_rate
    assert check["measured_usage"] == 0.0 and check["expected"] > 0.45
    assert check["hit_rate_off"] is True and check["requests_off"] == 4


def test_the_hit_rate_sweeps(kvbench, tmp_path):
    out = tmp_path / "sweep"
    code, _, err = kvbench(
        "sweep", "throughput", *SMALL, "--over", "prompts.reuse.hit_rate=0,0.5,1", "--no-stop-at-saturation",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [p["assignment"]["prompts.reuse.hit_rate"] for p in points] == ["0", "0.5", "1"]
    ratios = []
    for p in points:
        assert p["status"] == "complete"
        check = {e.name: e for e in load_manifest(out / p["run_dir"]).phases}["cached"].hit_rate
        assert check["hit_rate_off"] is False
        assert p["metrics"]["hit_ratio"] == pytest.approx(check["measured_usage"], abs=1e-3)
        ratios.append(p["metrics"]["hit_ratio"])
    # 1.0 is every whole block before the last token: just under 1 by construction
    assert ratios[0] == 0.0 and abs(ratios[1] - 0.5) <= 0.05 and 0.95 < ratios[2] < 1.0
    assert "hit_ratio" in (out / "summary.csv").read_text().splitlines()[0]
