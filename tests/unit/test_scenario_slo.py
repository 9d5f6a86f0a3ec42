"""A scenario's `slo:` section: bad input is one line, exit 2, before anything runs; a sweep
without --slo takes it (--slo overrides); a run's report judges its requests against it."""

import json
import textwrap

import pytest

from kvbench.results import REQUESTS, read_jsonl

SCENARIO = """\
name: slo-test
test: throughput
prompts: {{count: 4, lengths: [2000]}}
load: {{kind: concurrent, concurrency: 2, requests: 4}}
target: {{mock_profile: ci}}
{extra}
"""


def scenario_file(tmp_path, extra: str):
    path = tmp_path / "scn.yaml"
    path.write_text(SCENARIO.format(extra=textwrap.dedent(extra)))
    return path


BAD = [
    ("slo: {ttft_p99_ms: -5}", "slo.ttft_p99_ms: Input should be greater than 0"),
    ("slo: {ttft_p95_ms: 5}", "slo.ttft_p95_ms: unknown key"),
    ("slo: {ttft_p99_ms: fast}", "slo.ttft_p99_ms"),
    ("slo: {}", "needs at least one bound"),
    ("slo: {itl_p99_ms: 20}\noutput: {max_tokens: 1}", "no request has an inter-token latency"),
]


@pytest.mark.parametrize(("extra", "expected"), BAD, ids=[e for _, e in BAD])
@pytest.mark.parametrize("command", ["sweep", "run"])
def test_a_bad_slo_section_is_one_line_exit_2_before_anything_runs(
    run_cli, tmp_path, extra, expected, command
):
    path = scenario_file(tmp_path, extra)
    out = tmp_path / "out"
    args = ["--over", "load.concurrency=1,2"] if command == "sweep" else ["--output-dir"]
    code, _, err = run_cli(command, str(path), *args, *(["--out"] if command == "sweep" else []), str(out))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and str(path) in lines[0], err
    assert not out.exists()


def test_a_sweep_takes_the_scenarios_slo_unless_slo_is_given(tmp_path):
    from kvbench.sweep.commands import make_plan

    path = str(scenario_file(tmp_path, "slo: {ttft_p99_ms: 300, e2e_p99_ms: 9000}"))

    def plan(slo: list[str], sets: list[str] = ()) -> dict:
        args = (["load.concurrency=1,2"], list(sets), None, None, slo, 0.9, None, 1.0, 3, None, True)
        return make_plan(path, *args).slo

    assert plan([]) == {"ttft_p99_ms": 300.0, "e2e_p99_ms": 9000.0}
    assert plan(["ttft_p50_ms=50"]) == {"ttft_p50_ms": 50.0}  # --slo replaces the section, whole
    assert plan([], ["slo.ttft_p99_ms=120"]) == {"ttft_p99_ms": 120.0, "e2e_p99_ms": 9000.0}
    assert (
        make_plan(
            "throughput", ["load.concurrency=1"], [], None, None, [], 0.9, *[None, 1.0, 3, None, True]
        ).slo
        == {}
    )


def test_search_goodput_accepts_the_scenarios_slo(tmp_path):
    from kvbench.sweep.commands import make_plan

    path = str(scenario_file(tmp_path, "slo: {ttft_p99_ms: 300}"))
    plan = make_plan(path, ["load.concurrency=1..4"], [], None, None, [], 0.9, "goodput", 1.0, 3, None, True)
    assert plan.search is not None and plan.slo == {"ttft_p99_ms": 300.0}


@pytest.mark.slow
def test_a_runs_report_shows_attainment_against_the_scenarios_slo(kvbench, tmp_path):
    def run_cli(*args: str) -> tuple[object, str, str]:
        return kvbench(*args)

    # a TTFT bound between the fastest and slowest request: some good, some not, counted from rows
    path = scenario_file(tmp_path, "slo: {ttft_p99_ms: 1000000}")
    code, _, err = run_cli("run", str(path), "--output-dir", str(tmp_path / "a"), "--quiet")
    assert code == 0, err
    run_dir = next((tmp_path / "a").iterdir())
    rows = [r for r in read_jsonl(run_dir / REQUESTS) if r["label"] == "cached"]
    ttfts = sorted(r["ttft_ms"] for r in rows)
    bound = (ttfts[1] + ttfts[2]) / 2
    scn = (run_dir / "scenario.yaml").read_text().replace("1000000.0", f"{bound}")
    (run_dir / "scenario.yaml").write_text(scn)
    code, out, err = run_cli("report", str(run_dir))
    assert code == 0, err
    assert "SLO cached/cached: 2/4 good, attainment 50% [" in out
    md = (run_dir / "report.md").read_text()
    section = md.split("## SLO attainment and goodput")[1].split("\n## ")[0]
    line = next(x for x in section.splitlines() if x.startswith("| cached | cached |"))
    good = sum(t <= bound for t in ttfts)
    assert good == 2 and f"| 4 | {good} | 50% [" in line, line
    assert "(missed)" in line  # p99 of four TTFTs is the slowest, above the bound
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["test"] == "throughput"
