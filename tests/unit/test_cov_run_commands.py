"""`kvbench run` / `validate` from the command line (kvbench.run.commands) with the run itself
replaced: bad flags are one line and exit 2 before any server; how each ending of a run is told
(summary, results line, the failure's own words and exit 1, an interrupt's 130)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench.run.commands import execute
from kvbench.run.runner import RunOutcome
from kvbench.scenario import load_scenario


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """run_scenario replaced: records the scenario and options it was given."""
    calls: list[Any] = []

    async def fake(scn: Any, opts: Any) -> RunOutcome:
        calls.append((scn, opts))
        return RunOutcome(opts.output_dir / "run-1", "complete", 0, {}, 3, ["table line"])

    monkeypatch.setattr("kvbench.run.runner.run_scenario", fake)
    return calls


@pytest.mark.parametrize(
    ("lengths", "said"),
    [
        ("1000,abc", "--lengths '1000,abc': expected comma-separated token counts"),
        ("0,5", "must be positive"),
    ],
)
def test_bad_lengths_are_one_line_and_exit_2_before_any_run(run_cli, ran, lengths, said, tmp_path) -> None:
    code, _out, err = run_cli("run", "ttft", "--lengths", lengths, "--output-dir", str(tmp_path))
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1 and ran == []


def test_lengths_take_k_and_underscores(kvbench, ran, tmp_path) -> None:
    code, out, _ = kvbench(
        "run", "ttft", "--lengths", "1k,2_500,8k", "--no-report", "--output-dir", str(tmp_path)
    )
    ((scn, opts),) = ran
    assert code == 0 and list(scn.prompts.lengths) == [1000, 2500, 8000]
    assert opts.report is False and opts.output_dir == tmp_path
    assert out.splitlines() == ["table line", f"results: {tmp_path / 'run-1'}"]


def test_a_bad_dataset_file_is_refused_before_any_server(run_cli, ran, tmp_path) -> None:
    bad = tmp_path / "d.jsonl"
    bad.write_text('{"prompt": "hi"}\nnot json\n')
    code, _, err = run_cli("run", "throughput", "--dataset", str(bad), "--output-dir", str(tmp_path))
    assert code == 2 and f"{bad}:2: row: not JSON" in err and ran == []


def test_validate_prints_the_resolved_scenario_with_the_overrides(kvbench) -> None:
    code, out, _ = kvbench("validate", "ttft", "--set", "test.warm_repeats=3", "--set", "prompts.seed=9")
    assert code == 0
    first, rest = out.split("\n", 1)
    assert first.startswith("# resolved from ") and first.endswith("ttft.yaml")
    resolved = yaml.safe_load(rest)
    assert resolved["test"]["warm_repeats"] == 3 and resolved["prompts"]["seed"] == 9
    assert resolved == yaml.safe_load(yaml.safe_dump(resolved))  # every default written out


def test_validate_refuses_a_bad_override_naming_the_field(run_cli) -> None:
    code, _, err = run_cli("validate", "ttft", "--set", "test.warm_repeats=-1")
    assert code == 2 and "warm_repeats" in err and len(err.strip().splitlines()) == 1


def outcome(monkeypatch, result: RunOutcome | BaseException) -> None:
    async def fake(scn: Any, opts: Any) -> RunOutcome:
        if isinstance(result, BaseException):
            raise result
        return result

    monkeypatch.setattr("kvbench.run.runner.run_scenario", fake)


def scn() -> Any:
    return load_scenario("ttft")[0]


def test_a_failed_run_says_why_and_exits_1(monkeypatch, capsys, tmp_path) -> None:
    failed = RunOutcome(tmp_path / "r", "failed", 1, {"http_500": 2}, 4, ["a", "b"], failure="2 of 4 failed")
    outcome(monkeypatch, failed)
    code = execute(scn(), output_dir=tmp_path, quiet=True, allow_unverified_cold=False, report=False)
    out, err = capsys.readouterr()
    assert code == 1 and out.splitlines() == ["a", "b", f"results: {tmp_path / 'r'}"]
    assert err.strip() == "kvbench: 2 of 4 failed (exit 1)"


def test_an_interrupted_run_is_130_and_says_where_its_rows_are(monkeypatch, capsys, tmp_path) -> None:
    outcome(monkeypatch, RunOutcome(tmp_path / "r", "interrupted", 130, {}, 2))
    assert execute(scn(), output_dir=tmp_path, quiet=True, allow_unverified_cold=False, report=True) == 130
    err = capsys.readouterr().err
    assert f"interrupted; finished requests are in {tmp_path / 'r'}" in err and "kvbench report" in err
    outcome(monkeypatch, KeyboardInterrupt())
    assert execute(scn(), output_dir=tmp_path, quiet=True, allow_unverified_cold=False, report=True) == 130
    assert capsys.readouterr().err.strip() == "kvbench: interrupted"


def test_a_report_that_cannot_be_written_names_its_file(monkeypatch, tmp_path) -> None:
    from kvbench.results.files import WriteFailed

    outcome(monkeypatch, RunOutcome(tmp_path / "r", "complete", 0, {}, 1))

    def full(run_dir: Path, quiet: bool) -> Path:
        raise OSError(28, "No space left on device", str(run_dir / "report.html"))

    monkeypatch.setattr("kvbench.report.render.write_report", full)
    with pytest.raises(WriteFailed, match=r"report\.html: No space left on device"):
        execute(scn(), output_dir=tmp_path, quiet=True, allow_unverified_cold=False, report=True)


def test_export_writes_one_csv_row_per_request(kvbench, run_cli, tmp_path) -> None:
    import types

    from kvbench.run.context import RunOptions
    from kvbench.run.preflight.target import TargetInfo
    from kvbench.run.runner import start_manifest

    target = TargetInfo(kind="server", base_url="http://x", model="m", engine="generic", api="completions")
    conn = types.SimpleNamespace(run_path=tmp_path, run_id="20261206T000000Z-e-abc123", target=target)
    rd = start_manifest(scn(), RunOptions(quiet=True), conn, 0)  # type: ignore[arg-type]
    from kvbench.client import RequestRecord

    for i in range(5):
        rd.requests.write(RequestRecord(request_id=f"r{i}", phase="ttft", label="cold").to_row())
    rd.close()
    code, out, err = kvbench("export", str(tmp_path))
    target_csv = tmp_path / "requests.csv"
    assert code == 0, err
    assert out.strip() == f"5 rows -> {target_csv}" and len(target_csv.read_text().splitlines()) == 6
    code, _, err = run_cli("export", str(tmp_path), "--format", "xlsx")
    assert code == 2 and "--format 'xlsx': choose csv or parquet" in err
