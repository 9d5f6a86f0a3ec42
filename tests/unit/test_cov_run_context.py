"""How a run proves a cold start and records its rows (kvbench.run.context), and the persistence
test's hook between phases (kvbench.run.throughput.between_phases), on a Run made of fakes.

The fake server caches every text it answers until it is reset; a reset that "forgets" to empty
it is the broken engine a cold start must catch."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from kvbench.client import ClientConfig, RequestRecord
from kvbench.errors import ColdUnverified, KvbenchError, TargetUnreachable
from kvbench.load.worker_phase import NOT_SENT, WORKER_LOST
from kvbench.results import read_jsonl, read_manifest
from kvbench.results.schema import Label
from kvbench.run import context as context_mod
from kvbench.run import throughput as throughput_mod
from kvbench.run.context import Run, RunOptions, lost_worker_cause
from kvbench.run.preflight.target import TargetInfo
from kvbench.run.runner import start_manifest
from kvbench.scenario import Scenario


class Server:
    """The fake target: a text cache, a reset that may not work, probes that may fail."""

    def __init__(self, reset_empties: bool = True, reset_ok: bool = True, fail_probes: bool = False) -> None:
        self.reset_empties, self.reset_ok, self.fail_probes = reset_empties, reset_ok, fail_probes
        self.seen: set[str] = set()
        self.resets = 0
        self.report_cached = True


class Client:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.cfg = ClientConfig(base_url="http://fake", model="m")

    def now(self) -> int:
        return 0

    async def send(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        text = json.loads(body)["prompt"]
        if self.server.fail_probes:
            rec.fail("http_503", "busy")
            return rec
        words = len(text.split())
        rec.cached_tokens = (words if text in self.server.seen else 0) if self.server.report_cached else None
        self.server.seen.add(text)
        rec.sent_ns, rec.first_token_ns, rec.end_ns = 10, 20, 30
        return rec


class Adapter:
    engine = "fake"
    transfer_counters = ()
    hit_counters = ()

    def __init__(self, server: Server, can_reset: bool = True) -> None:
        self.server, self.can_reset = server, can_reset

    async def reset(self, http: Any, attempts: int = 5) -> tuple[bool, str]:
        self.server.resets += 1
        if not self.server.reset_ok:
            return False, "POST /reset_prefix_cache answered 404"
        if self.server.reset_empties:
            self.server.seen.clear()
        return True, "reset"


def scenario(**cache: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "ctx",
            "test": "throughput",
            "prompts": {"count": 1, "lengths": [20]},
            "load": {"kind": "concurrent", "concurrency": 1, "requests": 1},
            "telemetry": {"metrics": "off"},
            "cache": cache,
        }
    )


def make_run(
    tmp_path: Path, scn: Scenario, server: Server, can_reset: bool = True, **opts: Any
) -> tuple[Run, list[str]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    target = TargetInfo(kind="server", base_url="http://fake", model="m", engine="fake", api="completions")
    conn = types.SimpleNamespace(run_path=tmp_path, run_id="20261206T000000Z-ctx-abc123", target=target)
    rd = start_manifest(scn, RunOptions(quiet=True), conn, 0)  # type: ignore[arg-type]
    run = Run(
        scn, RunOptions(quiet=True, **opts), rd, target, None, Client(server), Adapter(server, can_reset), 0
    )  # type: ignore[arg-type]
    logged: list[str] = []
    run.progress.log = logged.append  # type: ignore[method-assign]
    return run, logged


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instant(_s: float) -> None:
        return None

    monkeypatch.setattr(context_mod.asyncio, "sleep", instant)


async def test_a_reset_that_empties_the_cache_verifies_the_cold_start(tmp_path) -> None:
    server = Server()
    run, _ = make_run(tmp_path, scenario(), server)
    info = await run.verify_cold_start()
    assert info["method"] == "salt+reset" and info["verified"] is True and info["reset"] is True
    assert info["probe_cached_tokens"] == 0 and server.resets == 1
    run.rd.close()
    probes = read_jsonl(tmp_path / "requests.jsonl")
    assert [r["label"] for r in probes] == ["probe", "probe"]
    assert probes[0]["prompt_tokens_requested"] == 512 and probes[0]["prompt_id"] == -1


async def test_a_reset_that_keeps_the_cache_is_tried_thrice_then_stops_the_run(tmp_path) -> None:
    server = Server(reset_empties=False)
    run, _ = make_run(tmp_path, scenario(verify="required"), server)
    with pytest.raises(ColdUnverified) as info:
        await run.verify_cold_start()
    msg = str(info.value)
    assert server.resets == 3 and "\n" not in msg
    # the second probe of each try found the first one's tokens: the number is in the line
    words = len(next(iter(server.seen)).split())
    assert f"cached_tokens={words}" in msg and "--allow-unverified-cold" in msg


async def test_allowed_or_best_effort_an_unverified_cold_start_runs_on(tmp_path) -> None:
    run, logged = make_run(
        tmp_path / "a", scenario(), Server(reset_empties=False), allow_unverified_cold=True
    )
    info = await run.verify_cold_start()
    assert info["verified"] is False and any("--allow-unverified-cold" in line for line in logged)
    best, _ = make_run(tmp_path / "b", scenario(verify="best_effort"), Server(reset_empties=False))
    assert (await best.verify_cold_start())["verified"] is False


async def test_failed_probes_prove_nothing_and_say_so(tmp_path) -> None:
    run, _ = make_run(tmp_path, scenario(verify="best_effort"), Server(fail_probes=True))
    info = await run.verify_cold_start()
    assert info["verified"] is None
    assert info["detail"].startswith("first probe failed: http_503: busy; second probe failed")


async def test_a_server_that_reports_no_cached_tokens_is_asked_once(tmp_path) -> None:
    server = Server()
    server.report_cached = False  # and no hit counters either: nothing to read
    run, _ = make_run(tmp_path, scenario(verify="best_effort"), server)
    info = await run.verify_cold_start()
    assert info["verified"] is None and server.resets == 1 and "cannot verify" in info["detail"]


async def test_a_refused_reset_stops_the_probe_at_once(tmp_path) -> None:
    server = Server(reset_ok=False)
    run, logged = make_run(tmp_path, scenario(verify="best_effort"), server)
    info = await run.verify_cold_start()
    assert info["reset"] is False and info["verified"] is None and server.resets == 1
    assert (
        await run.reset() is False
        and logged[-1] == "cache reset failed: POST /reset_prefix_cache answered 404"
    )


async def test_no_reset_or_no_verify_or_as_is(tmp_path) -> None:
    dirs = [tmp_path / n for n in "abcd"]
    no_reset, _ = make_run(dirs[0], scenario(verify="best_effort"), Server(), can_reset=False)
    info = await no_reset.verify_cold_start()
    assert info["method"] == "salt" and "engine 'fake' has no reset" in info["detail"]
    required, _ = make_run(dirs[1], scenario(verify="required"), Server(), can_reset=False)
    with pytest.raises(ColdUnverified, match=r"cold by per-run salt only.*cache\.verify: best_effort$"):
        await required.verify_cold_start()
    server = Server()
    off, _ = make_run(dirs[2], scenario(verify="off"), server)
    assert await off.verify_cold_start() == {
        "method": "salt+reset",
        "reset": True,
        "verified": None,
        "detail": "",
    }
    assert server.resets == 1 and not server.seen  # reset, no probe sent
    as_is, _ = make_run(dirs[3], scenario(initial="as_is"), Server())
    assert (await as_is.verify_cold_start())["method"] == "as_is"
    assert await as_is.reset() is True


async def test_a_failure_of_this_machine_is_recorded_as_a_client_limit(tmp_path) -> None:
    run, logged = make_run(tmp_path, scenario(), Server())
    rec = RequestRecord(request_id="r1", phase="cached")
    rec.fail("connect_error", "Cannot connect to host x:80 ssl:default [Errno 24] Too many open files")
    run.record(rec)
    other = RequestRecord(request_id="r2", phase="cached")
    other.fail("connect_error", "Cannot connect to host x:80 [Errno 111] Connection refused")
    run.record(other)
    run.rd.close()
    rows = read_jsonl(tmp_path / "requests.jsonl")
    assert [r["error_type"] for r in rows] == ["client_limit", "connect_error"]
    assert rows[0]["error_message"].startswith("this machine's limit, not the server: ")
    assert dict(run.error_counts) == {"client_limit": 1, "connect_error": 1}
    assert logged == [f"first failed request: client_limit: {rows[0]['error_message']}"]  # the first only


def test_a_lost_worker_is_named_by_its_first_accounted_row(tmp_path) -> None:
    run, _ = make_run(tmp_path, scenario(), Server())
    assert lost_worker_cause(run) is None
    for i, kind in enumerate([WORKER_LOST, NOT_SENT, NOT_SENT, "http_500"]):
        rec = RequestRecord(request_id=f"r{i}")
        rec.fail(kind, f"load worker load-1 was lost ({i})")
        run.records.append(rec)
    assert lost_worker_cause(run) == "3 requests of a lost load worker: load worker load-1 was lost (0)"


# --- between phases (the persistence test) -------------------------------------------------------


class Health:
    def __init__(self, answers: list[int]) -> None:
        self.answers, self.base_url, self.asked = answers, "http://fake", 0

    async def request(self, method: str, path: str) -> tuple[int, Any]:
        assert (method, path) == ("GET", "/v1/models")
        self.asked += 1
        status = self.answers.pop(0) if self.answers else 200
        if status == 0:
            raise ConnectionError("refused")
        return status, {}


def persistence(command: str | None, base_url: str | None = None) -> Scenario:
    test = {
        "kind": "throughput",
        "between_phases": {"command": command, "base_url": base_url, "wait_healthy_s": 5},
    }
    return Scenario.model_validate(
        {
            "name": "persist",
            "test": test,
            "target": {"base_url": "http://fake"},
            "prompts": {"count": 1, "lengths": [20]},
            "load": {"kind": "concurrent", "concurrency": 1, "requests": 1},
            "telemetry": {"metrics": "off"},
        }
    )


async def test_between_phases_runs_the_command_moves_the_target_and_waits_for_health(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(throughput_mod.asyncio, "sleep", _instant)
    marker = tmp_path / "ran"
    run, logged = make_run(tmp_path, persistence(f"touch {marker}", "http://127.0.0.1:9999/"), Server())
    run.http = Health([0, 503, 200])  # type: ignore[assignment]
    await throughput_mod.between_phases(run)
    assert marker.exists() and logged == [f"between phases: touch {marker}"]
    assert run.http.base_url == "http://127.0.0.1:9999" and run.client.cfg.base_url == "http://127.0.0.1:9999"
    assert run.http.asked == 3  # refused, busy, then healthy
    run.rd.save_manifest()
    assert read_manifest(tmp_path)["target"]["base_url_after"] == "http://127.0.0.1:9999"


async def test_a_failing_command_or_a_server_that_never_comes_back_stops_the_run(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(throughput_mod.asyncio, "sleep", _instant)
    run, _ = make_run(tmp_path, persistence("exit 3"), Server())
    with pytest.raises(KvbenchError, match=r"^between_phases\.command exited with 3: exit 3$"):
        await throughput_mod.between_phases(run)
    clock = iter(range(0, 1000, 4))
    monkeypatch.setattr(throughput_mod.time, "monotonic", lambda: next(clock))
    with pytest.raises(TargetUnreachable, match=r"http://fake did not become healthy within 5 s"):
        await throughput_mod.wait_healthy(Health([503] * 100), 5.0)  # type: ignore[arg-type]


async def test_restarting_the_embedded_mock_needs_one(tmp_path) -> None:
    run, _ = make_run(tmp_path, persistence(throughput_mod.RESTART_MOCK), Server())
    with pytest.raises(KvbenchError, match=r"needs the embedded mock \(no --base-url\)"):
        await throughput_mod.between_phases(run)


def test_the_throughput_table_shows_noise_only_where_a_phase_had_it(tmp_path) -> None:
    from kvbench.results.schema import PhaseEntry

    quiet = PhaseEntry(
        name="quiet",
        label=Label.CACHED,
        repetition=0,
        started_ns=0,
        ended_ns=2,
        duration_s=2.0,
        requests=10,
        errors=1,
        requests_ok_per_s=4.5,
    )
    noisy = quiet.model_copy(update={"name": "noisy", "noise": {"mean_bytes_per_s": 2.5e9}})
    head, q, n = throughput_mod.throughput_table([quiet, noisy])
    assert head.split()[:3] == ["phase", "requests", "errors"]
    assert q.split() == ["quiet", "10", "1", "2.00", "4.500", "-"] and n.split()[-1] == "2.500"


async def _instant(_s: float) -> None:
    return None
