"""`kvbench sweep`'s plan: grid parsing, and every kind of bad input as one line, exit 2, before
any point runs (no sweep directory is made)."""

import pytest

from kvbench.sweep.grid import grid, parse_over, point_name, split_values


def test_values_split_at_top_level_commas_only():
    assert split_values("1,2, 4") == ["1", "2", "4"]
    assert split_values("[1000,2000],[4000]") == ["[1000,2000]", "[4000]"]
    assert split_values("") == []


def test_two_fields_make_a_grid_first_field_outermost():
    axes = parse_over(["load.concurrency=1,2", "prompts.count=10,40,80"])
    points = grid(axes)
    assert len(points) == 6
    assert points[0] == {"load.concurrency": "1", "prompts.count": "10"}
    assert points[3] == {"load.concurrency": "2", "prompts.count": "10"}
    assert point_name(3, points[3]) == "3-load.concurrency=2-prompts.count=10"
    assert point_name(0, {"prompts.lengths": "[1000,2000]"}, repeat=1) == "0-prompts.lengths=_1000_2000_-r1"


BAD = [
    (["--over", "load.bogus=1,2"], "load.bogus: no such scenario field"),
    (
        ["--over", "load.concurrency=1,two"],
        "--over load.concurrency=two: load.concurrency: must be a valid integer",
    ),
    (["--over", "load.concurrency="], "an empty list of values"),
    (["--over", "load.concurrency"], "expected FIELD=V1,V2"),
    (["--over", "load.concurrency=1,1"], "a value appears twice"),
    (["--over", "a.b=1", "--over", "c.d=1", "--over", "e.f=2"], "at most 2 fields"),
    (["--over", "load.concurrency=1", "--slo", "ttft_p95_ms=100"], "--slo ttft_p95_ms: no such SLO"),
    (["--over", "load.concurrency=1", "--slo", "ttft_p99_ms=fast"], "expected milliseconds"),
    (
        ["--over", "load.concurrency=1,2", "--slo", "itl_p99_ms=20", "--set", "output.max_tokens=1"],
        "no request has an inter-token latency",
    ),
    (["--search", "goodput", "--over", "load.concurrency=1..8"], "needs an SLO"),
    (["--search", "goodput", "--over", "load.concurrency=8..1", "--slo", "ttft_p99_ms=9"], "LO below HI"),
    (["--search", "goodput", "--over", "prompts.count=1..8", "--slo", "ttft_p99_ms=9"], "steps a load field"),
    (["--over", "load.concurrency=1", "--attainment", "1.5"], "--attainment 1.5"),
    (["--over", "load.concurrency=1", "--mock-profile", "nope"], "unknown mock profile 'nope'"),
    (
        ["--over", "load.concurrency=1", "--base-url", "http://127.0.0.1:9", "--baseline-offload-off"],
        "--over load.concurrency=1 (baseline arm): --baseline-offload-off: turns off the embedded mock",
    ),
    (
        ["--over", "load.concurrency=1", "--mock-profile", "fixed-delay", "--baseline-offload-off"],
        "mock profile fixed-delay has no cache tiers",
    ),
    (
        ["--over", "load.concurrency=1,2", "--baseline-set", "load.bogus=3"],
        "load.bogus: unknown key",
    ),
    (["--over", "load.concurrency=1", "--baseline-url", "ftp://x"], "target.base_url: must start with http"),
    (
        [
            "--search",
            "goodput",
            "--over",
            "load.concurrency=1..4",
            "--slo",
            "ttft_p99_ms=9",
            "--baseline-offload-off",
        ],
        "a second arm runs with a grid",
    ),
]


@pytest.mark.parametrize(("args", "expected"), BAD, ids=[e for _, e in BAD])
def test_bad_input_is_one_line_and_exit_2(run_cli, tmp_path, args, expected):
    out = tmp_path / "sweep"
    code, _, err = run_cli("sweep", "throughput", *args, "--out", str(out))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err
    assert not out.exists()  # nothing ran


def test_resume_needs_a_sweep_there(run_cli, tmp_path):
    code, _, err = run_cli("sweep", "--resume", str(tmp_path))
    assert code == 2 and "no sweep.json there" in err


def test_resume_takes_its_plan_from_the_directory(run_cli, tmp_path):
    (tmp_path / "sweep.json").write_text("{}")
    code, _, err = run_cli("sweep", "--resume", str(tmp_path), "--slo", "ttft_p99_ms=5")
    assert code == 2 and "not a sweep file" in err  # an unreadable sweep.json: one line


def test_resume_refuses_a_new_plan_on_the_command_line(run_cli, tmp_path):
    from kvbench.sweep.state import SweepPlan, SweepState, write_state

    plan = SweepPlan(scenario="throughput", over=[("load.concurrency", ["1"])])
    write_state(tmp_path, SweepState(kvbench_version="0", status="interrupted", plan=plan))
    code, _, err = run_cli("sweep", "--resume", str(tmp_path), "--slo", "ttft_p99_ms=5")
    assert code == 2 and err.strip().endswith("drop --slo")
