"""The run pipeline without a network: the throughput phase plan, retries in Run.issue, the
end-of-run failure line, the test-type registry, and the checks made before any server is contacted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.client import ClientConfig, RequestRecord
from kvbench.errors import ScenarioError, UsageError
from kvbench.load.prompts import Prompt
from kvbench.results import RunDir, read_jsonl
from kvbench.results.schema import Label
from kvbench.run import context as context_mod
from kvbench.run.context import Run, RunOptions
from kvbench.run.registry import TEST_TYPES, type_of_test
from kvbench.run.runner import check_output_dir, outcome
from kvbench.run.throughput import throughput_plan
from kvbench.scenario import SECTIONS, Scenario, load_scenario


def scenario(test: dict | str = "throughput", **extra: object) -> Scenario:
    return Scenario.model_validate({"name": "t", "test": test, "prompts": {"lengths": [10]}, **extra})


# --- the throughput phase plan ------------------------------------------------------------------------


def plan_of(scn: Scenario, restart: bool = False) -> list[tuple[str, str, str]]:
    return [(p.name, p.label.value, p.salt_mode) for p in throughput_plan(scn, restart)]


def test_plan_cached_only() -> None:
    assert plan_of(scenario()) == [("cached", "cached", "run")]


def test_plan_baseline_first_then_cached() -> None:
    scn = scenario({"kind": "throughput", "baseline": True})
    assert plan_of(scn) == [("baseline", "baseline", "request"), ("cached", "cached", "run")]


def test_plan_noisy_pairs_replace_cached_and_respect_order() -> None:
    noisy = {"enabled": True, "pairs": 2, "order": "noisy_first", "cache_start": "cold"}
    scn = scenario({"kind": "throughput", "noisy": noisy})
    assert [n for n, _, _ in plan_of(scn)] == ["noisy-1", "quiet-1", "noisy-2", "quiet-2"]
    assert all(p.noisy == (p.label is Label.NOISY) for p in throughput_plan(scn, False))


def test_plan_persistence_and_repetitions() -> None:
    scn = scenario({"kind": "throughput"}, repetitions=2)
    assert plan_of(scn, restart=True) == [
        ("cached-r1", "cached", "run"),
        ("after-restart-r1", "persisted", "keep"),
        ("cached-r2", "cached", "run"),
        ("after-restart-r2", "persisted", "keep"),
    ]
    assert [p.repetition for p in throughput_plan(scn, True)] == [0, 0, 1, 1]


# --- retries -----------------------------------------------------------------------------------------


class FakeClient:
    """Fails the first `failures` sends with http_503, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.cfg = ClientConfig(base_url="http://x", model="m")
        self.failures = failures
        self.sends = 0

    def now(self) -> int:
        return 0

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        self.sends += 1
        if self.sends <= self.failures:
            rec.status, rec.error_type, rec.error_message = "error", "http_503", "busy"
        return rec


def make_run(tmp_path: Path, failures: int, retries: int) -> tuple[Run, FakeClient]:
    scn = scenario(retries=retries, telemetry={"metrics": "off"})
    client = FakeClient(failures)
    rd = RunDir(tmp_path, "20261130T000000Z-t-abcdef")
    run = Run(scn, RunOptions(quiet=True), rd, None, None, client, None, 0)  # type: ignore[arg-type]
    return run, client


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instant(_s: float) -> None:
        return None

    monkeypatch.setattr(context_mod.asyncio, "sleep", instant)


@pytest.mark.parametrize(
    ("failures", "retries", "sends", "ok", "attempt"),
    [(0, 0, 1, True, 1), (1, 0, 1, False, 1), (1, 2, 2, True, 2), (5, 2, 3, False, 3)],
)
async def test_retries_record_only_the_final_attempt(tmp_path, failures, retries, sends, ok, attempt) -> None:
    run, client = make_run(tmp_path, failures, retries)
    rec = await run.issue(phase="cached", label=Label.CACHED, rep=0, prompt=Prompt(0, 10, "a b"), text="a b")
    run.rd.close()
    assert client.sends == sends and rec.ok is ok and rec.attempt == attempt
    rows = read_jsonl(tmp_path / "requests.jsonl")
    assert len(rows) == 1 and rows[0]["attempt"] == attempt and rows[0]["label"] == "cached"
    assert dict(run.error_counts) == ({} if ok else {"http_503": 1})


# --- the end-of-run failure line -------------------------------------------------------------------


async def test_failure_line_counts_requests_not_attempts_or_probes(tmp_path) -> None:
    run, _ = make_run(tmp_path, failures=10, retries=1)
    for phase, label in (("probe", Label.PROBE), ("probe", Label.PROBE), ("cached", Label.CACHED)):
        await run.issue(phase=phase, label=label, rep=0, prompt=Prompt(0, 10, "a"), text="a")
    run.rd.close()
    out = outcome(run)
    assert out.exit_code == 1 and out.requests == 1
    # one measured request failed (after 2 attempts); the probes' failures are not in this line
    assert out.summary_lines[-1] == "1 of 1 requests failed (100.0% > max_error_rate 0.0%): 1 http_503"


# --- the registry ------------------------------------------------------------------------------------


def test_registry_and_sections_list_the_same_tests() -> None:
    assert set(TEST_TYPES) == set(SECTIONS)
    for name, tt in TEST_TYPES.items():
        assert tt.section is SECTIONS[name] and tt.name == name
    assert type_of_test(scenario("ttft", load={"kind": "sequential"})).name == "ttft"


def test_pin_slot_comes_from_the_ttft_test_type() -> None:
    scn = scenario({"kind": "ttft", "eviction": "slot_file"})
    from kvbench.engines.adapters import get_adapter

    llamacpp = get_adapter("llamacpp")
    assert type_of_test(scn).extra_body(scn, llamacpp) == {"id_slot": 0}
    assert type_of_test(scenario()).extra_body(scenario(), llamacpp) == {}


# --- checked before contacting any server --------------------------------------------------------------


def test_output_dir_that_cannot_hold_files(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=r"^--output-dir .*a-file/runs: cannot write there"):
        check_output_dir(blocker / "runs")
    check_output_dir(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir() and not list((tmp_path / "new" / "dir").iterdir())


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["kvbench", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code or 0), capsys.readouterr().err


def test_unwritable_output_dir_is_exit_2_before_the_server(monkeypatch, capsys, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # port 9 (discard) would be exit 3 "cannot reach" if the server were contacted first
    code, err = _cli(
        monkeypatch, capsys, "run", "ttft", "--base-url", "http://127.0.0.1:9", "--output-dir", str(blocker)
    )
    assert code == 2
    assert err.strip().splitlines() == [f"kvbench: --output-dir {blocker}: cannot write there (File exists)"]


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:99999", "http://127.0.0.1:abc", "http://[::1", "http://h:0"]
)
def test_malformed_base_url_is_exit_2_naming_the_field(monkeypatch, capsys, tmp_path, url) -> None:
    code, err = _cli(monkeypatch, capsys, "run", "ttft", "--base-url", url, "--output-dir", str(tmp_path))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "target.base_url: " in lines[0], lines
    with pytest.raises(ScenarioError, match=r"test\.between_phases\.base_url"):
        load_scenario("throughput", {"test.between_phases.base_url": url})


def test_good_urls_are_normalised() -> None:
    for url, want in [("http://[::1]:8000/v1/", "http://[::1]:8000"), ("https://h", "https://h")]:
        assert scenario(target={"base_url": url}).target.base_url == want
