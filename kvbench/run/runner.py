"""run_scenario(): connect to the target, build the client and the manifest, run the test's plan,
finish the run directory.

    run_scenario -> connect_target -> make_client -> start_manifest -> run_plan -> finish -> outcome

A run is a list of phases. Every request becomes a row on disk the moment it
ends (failed and cancelled ones too); the manifest is rewritten at each phase
boundary, so an interrupted or killed run still says what it did. The test's plan
comes from the test-type registry (kvbench.run.registry); nothing here knows the list.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench import __version__
from kvbench.client import ClientConfig, StreamingClient, make_session
from kvbench.client.control import ControlClient
from kvbench.client.heap import freeze_heap
from kvbench.engines.adapters import EngineAdapter, get_adapter
from kvbench.errors import KvbenchError, UsageError
from kvbench.load.ray_backend import NOT_SENT, WORKER_LOST
from kvbench.results import METRIC_DELTAS, SCENARIO, RunDir, new_run_dir, utc_now_iso, write_json_atomic
from kvbench.results.files import WriteFailed, write_text_atomic
from kvbench.results.schema import (
    ColdStart,
    EnvironmentInfo,
    Label,
    LabRecord,
    LengthRangeInfo,
    LoadShape,
    Manifest,
    OptionsInfo,
    TargetRecord,
)
from kvbench.run.context import Run, RunOptions, lost_worker_cause
from kvbench.run.mock_lateness_record import record_mock_lateness
from kvbench.run.preflight.limits import check_cluster_room, ensure_open_files, fd_budget
from kvbench.run.preflight.names import check_names
from kvbench.run.preflight.target import (
    TargetInfo,
    embedded_mock,
    identify,
    mock_accelerator_note,
    preflight,
    remember_secrets,
    request_headers,
)
from kvbench.run.prompt_set import make_prompt_set
from kvbench.run.registry import type_of_test
from kvbench.run.remote import connect_cluster
from kvbench.scenario import Scenario, scenario_to_yaml

__all__ = ["RunOptions", "RunOutcome", "run_scenario"]


@dataclass
class RunOutcome:
    """How a run ended. `run_dir` is None only when it was interrupted before the directory existed."""

    run_dir: Path | None
    status: str
    exit_code: int
    error_counts: dict[str, int]
    requests: int
    summary_lines: list[str] = field(default_factory=list)
    failure: str = "the error rate exceeded max_error_rate"  # why exit_code is 1


@dataclass
class Connection:
    """The target as connect_target found it: where it is, what it runs, the run directory."""

    run_id: str
    run_path: Path
    target: TargetInfo
    session: Any  # aiohttp.ClientSession
    http: ControlClient
    adapter: EngineAdapter


def environment() -> dict[str, Any]:
    commit = None
    with contextlib.suppress(Exception):
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).parent,
            ).stdout.strip()
            or None
        )
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "git_commit": commit,
    }


def _install_interrupt_handlers(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    """SIGINT/SIGTERM cancel the run (in-flight requests become `cancelled` rows, noise stops, the
    manifest says `interrupted`); a second one exits at once. Set on the loop itself because
    uvloop does not run asyncio.Runner's own SIGINT handler while it waits."""
    count = 0

    def on_signal() -> None:
        nonlocal count
        count += 1
        if count == 1:
            task.cancel()
        else:
            print("kvbench: interrupted again; exiting now", file=sys.stderr, flush=True)
            os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)


def _remove_interrupt_handlers(loop: asyncio.AbstractEventLoop) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)


async def run_scenario(scn: Scenario, opts: RunOptions) -> RunOutcome:
    """Run a validated scenario end to end; returns where the results are and the exit code.

    SIGINT/SIGTERM end it as `interrupted` (exit 130) with the run directory, when there is one."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    if me is not None:
        _install_interrupt_handlers(loop, me)
    made: list[Path] = []  # the run directory, once it exists
    try:
        return await _run_scenario(scn, opts, made)
    except asyncio.CancelledError:
        if me is not None:
            me.uncancel()
        return RunOutcome(made[0] if made else None, "interrupted", 130, {}, 0)
    finally:
        _remove_interrupt_handlers(loop)


async def _run_scenario(scn: Scenario, opts: RunOptions, made: list[Path]) -> RunOutcome:
    check_names(scn)
    check_output_dir(opts.output_dir)
    ensure_open_files(fd_budget(scn))
    headers = request_headers(scn, opts.api_key_env)
    remember_secrets(scn, headers)
    origin_ns = time.perf_counter_ns()
    async with contextlib.AsyncExitStack() as stack:
        cluster = connect_cluster(scn)  # Ray first: a missing Ray or cluster is exit 2 before anything runs
        if cluster is not None:
            from kvbench.cluster.session import disconnect

            stack.callback(disconnect)
            check_cluster_room(scn, cluster)  # all the noise and load asked for, or exit 2 now
        conn = await connect_target(stack, scn, opts, headers, made)
        client = make_client(scn, opts, conn, origin_ns, headers)
        stack.push_async_callback(client.aclose)
        rd = start_manifest(scn, opts, conn, origin_ns)
        run = Run(scn, opts, rd, conn.target, conn.http, client, conn.adapter, origin_ns)
        if cluster is not None:
            rd.update(cluster={"session": cluster.record()})
        closer = getattr(run.load_backend, "aclose", None)
        if closer is not None:
            stack.push_async_callback(closer)
        await run_plan(run)
    note = record_mock_lateness(run)  # the mock has stopped: its ground truth is whole
    if note:
        run.summary_lines.append(note)
    return outcome(run)


async def connect_target(
    stack: contextlib.AsyncExitStack,
    scn: Scenario,
    opts: RunOptions,
    headers: dict[str, str],
    made: list[Path],
) -> Connection:
    """Start the embedded mock if no server is named, check the server answers, learn what it is.

    The run directory is created here: before the mock (its ground truth goes in it), else only
    once the server has answered, so an unreachable server leaves no empty directory behind."""
    run_id: str | None = None
    run_path: Path | None = None
    mock = None
    base_url = scn.target.base_url
    if base_url is None:
        run_id, run_path = new_run_dir(opts.output_dir, scn.name)
        made.append(run_path)
        needs_fabric = scn.test.noisy_phases and scn.noise.kind == "tcp" and not scn.noise.targets
        persist = opts.mock_persist_dir or (run_path / "mock-g4" if scn.test.restarts_server else None)
        mock = await stack.enter_async_context(
            embedded_mock(
                scn.target.mock_profile,
                run_path / "mock_ground_truth.jsonl",
                needs_fabric,
                persist,
                {**scn.test.mock_defaults, **scn.target.mock_overrides},
            )
        )
        base_url = mock.base_url
    session = await stack.enter_async_context(
        make_session(max(scn.load.max_in_flight, scn.test.max_in_flight or 0), scn.target.timeouts.connect_s)
    )
    http = ControlClient(session, base_url, headers)
    model, version, max_len = await preflight(http, scn)
    engine = await identify(http, scn)
    max_len = scn.target.max_model_len or max_len
    problem = scn.context_problem(max_len, "the model's context")
    if problem:
        raise UsageError(problem)
    if run_path is None or run_id is None:
        run_id, run_path = new_run_dir(opts.output_dir, scn.name)
        made.append(run_path)
    target = TargetInfo(
        kind="mock" if mock else "server",
        base_url=base_url,
        model=model,
        engine=engine,
        api=scn.target.api,
        mock_profile=getattr(mock, "profile_name", None) if mock else None,
        server_version=version,
        max_model_len=max_len,
        mock=mock,
        header_names=sorted(headers),
    )
    adapter = get_adapter(engine)
    return Connection(run_id, run_path, target, session, http, adapter)


def make_client(
    scn: Scenario, opts: RunOptions, conn: Connection, origin_ns: int, headers: dict[str, str]
) -> StreamingClient:
    """The timed client: the scenario's generation settings plus what the engine and the test add."""
    cfg = ClientConfig(
        base_url=conn.target.base_url,
        model=conn.target.model,
        api=scn.target.api,
        max_tokens=scn.output.max_tokens,
        temperature=scn.output.temperature,
        ignore_eos=scn.output.ignore_eos,
        first_token_timeout_s=scn.target.timeouts.first_token_s,
        total_timeout_s=scn.target.timeouts.total_s,
        idle_timeout_s=scn.target.timeouts.idle_s,
        transport=scn.target.transport,
        extra_body={
            **conn.adapter.extra_body,
            **type_of_test(scn).extra_body(scn, conn.adapter),
            **opts.extra_body,
        },
    )
    return StreamingClient(cfg, conn.session, origin_ns, headers)


def start_manifest(scn: Scenario, opts: RunOptions, conn: Connection, origin_ns: int) -> RunDir:
    """Write the resolved scenario and the first manifest (status running) into the run directory."""
    write_text_atomic(conn.run_path / SCENARIO, scenario_to_yaml(scn, redact=True))
    rd = RunDir(conn.run_path, conn.run_id)
    rd.manifest = Manifest(
        kvbench_version=__version__,
        run_id=conn.run_id,
        run_dir=str(conn.run_path),
        scenario_name=scn.name,
        test=scn.test_name,
        status="running",
        started_at=utc_now_iso(),
        clock_origin_ns=origin_ns,
        target=TargetRecord.model_validate(conn.target.manifest()),
        simulated=conn.target.mock is not None,
        reference=scn.reference,
        environment=EnvironmentInfo.model_validate(environment()),
        options=OptionsInfo(
            allow_unverified_cold=opts.allow_unverified_cold,
            retries=scn.retries,
            api_key_env=opts.api_key_env or scn.target.api_key_env,
            max_error_rate=scn.max_error_rate,
        ),
        load=load_shape(scn),
        lab=lab_record(conn.target.base_url, scn),
    )
    rd.save_manifest()
    return rd


async def run_plan(run: Run) -> None:
    """Prompts, a verified cold start, then the test's phases; the manifest says how it ended."""
    scn = run.scn
    status = "failed"
    try:
        run.progress.log(
            f"kvbench {__version__}: {scn.name} against {run.target.kind} {run.http.base_url} "
            f"(model {run.target.model}, engine {run.target.engine}) -> {run.rd.path}"
        )
        if run.target.mock is not None and (note := mock_accelerator_note()) is not None:
            run.progress.log(note)
        prompts = await make_prompt_set(run)
        run.rd.update(cold_start=ColdStart.model_validate(await run.verify_cold_start()))
        freeze_heap()  # no full GC pass over the start-up heap in the middle of a phase
        await _unwrap_groups(type_of_test(scn).plan(run, prompts))
        lost = lost_worker_cause(run)
        status = "failed" if lost else "complete"
        if lost:
            run.rd.update(error=lost)
    except asyncio.CancelledError:
        status = "interrupted"
        raise
    except KvbenchError as exc:
        # the manifest's status has no `disk` value: `failed` with the cause first says it
        disk = isinstance(exc, WriteFailed) and exc.disk
        run.rd.update(error=f"disk: {exc.message}" if disk else exc.message)
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            status = "interrupted"
        else:
            run.rd.update(error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        finish(run, status)


async def _unwrap_groups(plan: Any) -> None:
    """A plan's task group that failed with a kvbench error (every worker found the disk full, say)
    raises that one error: one line, not `internal error: ExceptionGroup`."""
    try:
        await plan
    except BaseExceptionGroup as group:
        found = group.subgroup(lambda e: isinstance(e, KvbenchError))
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        if found is None:
            raise
        raise found from None


def finish(run: Run, status: str) -> None:
    """Final manifest, metric deltas, every writer closed (on any ending, interrupts included)."""
    run.rd.release_reserve()  # room for these last files, should the rows have filled the disk
    try:
        _final_files(run, status)
    finally:
        run.rd.close()
        if run.noise_writer is not None:
            run.noise_writer.close()
        if run.scraper.writer is not None:
            run.scraper.writer.close()


def _final_files(run: Run, status: str) -> None:
    run.rd.update(
        status=status,
        ended_at=utc_now_iso(),
        error_counts=dict(run.error_counts),
        requests=len(run.records),
        **run.client.clock_manifest(),
    )
    remote = getattr(run.load_backend, "record", None)  # Ray load workers: where they ran, which were lost
    if remote is not None and run.rd.manifest is not None:
        run.rd.update(cluster={**(run.rd.manifest.cluster or {}), "load": remote()})
    run.rd.save_manifest()  # first: the file that says how the run ended
    write_json_atomic(run.rd.path / METRIC_DELTAS, run.metric_deltas)


def outcome(run: Run) -> RunOutcome:
    """Exit code from the measured requests (probes excluded); one failure line that counts requests
    only (never attempts or probes mixed in)."""
    scn = run.scn
    measured = [r for r in run.records if r.phase != Label.PROBE]
    failures = Counter(r.error_type or "unknown" for r in measured if not r.ok)
    failed = sum(failures.values())
    rate = failed / len(measured) if measured else 0.0
    exit_code = 0 if rate <= scn.max_error_rate else 1
    lines = list(run.summary_lines)
    if exit_code:
        by_type = ", ".join(f"{n} {kind}" for kind, n in failures.most_common())
        lines.append(
            f"{failed} of {len(measured)} requests failed ({rate:.1%} > max_error_rate "
            f"{scn.max_error_rate:.1%}): {by_type}"
        )
    done = RunOutcome(run.rd.path, "complete", exit_code, dict(run.error_counts), len(measured), lines)
    # a phase that sent fewer requests than it was asked measured another load: no error rate excuses it
    asked = Counter(r.phase for r in measured)
    if any(r.error_type == WORKER_LOST for r in measured) and not done.exit_code:
        done.exit_code, done.failure = 1, "a load worker was lost mid-phase"
    for phase, n in Counter(r.phase for r in measured if r.error_type == NOT_SENT).items():
        done.exit_code, done.failure = 1, "a phase sent fewer requests than it was asked"
        lines.append(
            f"phase {phase}: {n} of {asked[phase]} requests were never sent (a load worker was lost "
            "before sending them): the run fails whatever max_error_rate says"
        )
    return done


def check_output_dir(path: Path) -> None:
    """--output-dir must be a directory we can create files in; checked before any server is contacted."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".kvbench-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UsageError(f"--output-dir {path}: cannot write there ({why})") from None


def load_shape(scn: Scenario) -> LoadShape:
    """The manifest's account of how hard the run pushed."""
    load = scn.load
    lengths = scn.prompts.lengths
    return LoadShape(
        kind=load.kind,
        concurrency=load.max_in_flight,
        rate=load.arrival_rate,
        requests=load.requests_per_phase(scn.prompts.resolved_count()),
        prompt_count=scn.prompts.resolved_count(),
        lengths=list(lengths)
        if isinstance(lengths, list)
        else LengthRangeInfo(min=lengths.min, max=lengths.max, distribution=lengths.distribution),
        max_tokens=scn.output.max_tokens,
    )


def lab_record(base_url: str, scn: Scenario) -> LabRecord | None:
    """The lab's link shape when the target (or the persistence test's second server) is a lab engine."""
    from kvbench.lab.manifest import lab_manifest  # reads the lab's state file only

    after = getattr(getattr(scn.test, "between_phases", None), "base_url", None)
    found = lab_manifest(base_url, after)
    return LabRecord.model_validate(found) if found is not None else None
