"""run_scenario(): wire target, prompts, cache control, load, noise and telemetry; write the run directory.

A run is a list of phases. Every request becomes a row on disk the moment it
ends (failed and cancelled ones too); the manifest is rewritten at each phase
boundary, so an interrupted or killed run still says what it did.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvbench import __version__
from kvbench.cache import ADAPTERS, TargetHTTP
from kvbench.client import ClientConfig, StreamingClient, make_session
from kvbench.errors import KvbenchError
from kvbench.prompts import Prompt, bounded_counter, build_prompts, make_salt, resolve_lengths
from kvbench.results import METRIC_DELTAS, PROMPTS, SCENARIO, RunDir, new_run_dir, utc_now_iso
from kvbench.run_context import Run, RunOptions
from kvbench.scenario import Scenario, scenario_to_yaml
from kvbench.target import TargetInfo, embedded_mock, identify, preflight, request_headers
from kvbench.throughput import run_throughput
from kvbench.tokenize import server_token_counter
from kvbench.ttft import pin_slot, run_ttft

__all__ = ["RunOptions", "RunOutcome", "run_scenario"]


@dataclass
class RunOutcome:
    run_dir: Path
    status: str
    exit_code: int
    error_counts: dict[str, int]
    requests: int
    summary_lines: list[str] = field(default_factory=list)


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
    """Run a validated scenario end to end; returns where the results are and the exit code."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    if me is not None:
        _install_interrupt_handlers(loop, me)
    try:
        return await _run_scenario(scn, opts)
    finally:
        _remove_interrupt_handlers(loop)


async def _run_scenario(scn: Scenario, opts: RunOptions) -> RunOutcome:
    headers = request_headers(scn, opts.api_key_env)
    origin_ns = time.perf_counter_ns()
    async with contextlib.AsyncExitStack() as stack:
        run_id: str | None = None
        run_path: Path | None = None
        mock = None
        base_url = scn.target.base_url
        if base_url is None:
            run_id, run_path = new_run_dir(opts.output_dir, scn.name)
            opts.run_dir = run_path
            needs_fabric = scn.noisy.enabled and scn.noise.kind == "tcp" and not scn.noise.targets
            persist = opts.mock_persist_dir or (run_path / "mock-g4" if scn.between_phases.command else None)
            mock = await stack.enter_async_context(
                embedded_mock(
                    scn.target.mock_profile,
                    run_path / "mock_ground_truth.jsonl",
                    needs_fabric,
                    persist,
                    scn.target.mock_overrides,
                )
            )
            base_url = mock.base_url
        conc = (
            scn.load.concurrency
            if hasattr(scn.load, "concurrency")
            else getattr(scn.load, "max_concurrency", 1)
        )
        session = await stack.enter_async_context(make_session(conc, scn.target.timeouts.connect_s))
        http = TargetHTTP(session, base_url, headers)
        model, version, max_len = await preflight(http, scn)
        engine = await identify(http, scn)
        max_len = scn.target.max_model_len or max_len
        if max_len is not None and scn.prompts.max_length() + scn.output.max_tokens > max_len:
            from kvbench.errors import UsageError

            raise UsageError(
                f"prompts.lengths: longest prompt {scn.prompts.max_length()} + max_tokens "
                f"{scn.output.max_tokens} exceeds the model's context {max_len}"
            )
        if run_path is None or run_id is None:
            run_id, run_path = new_run_dir(opts.output_dir, scn.name)
        opts.run_dir = run_path
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
        adapter = ADAPTERS.get(engine, ADAPTERS["generic"])
        cfg = ClientConfig(
            base_url=base_url,
            model=model,
            api=scn.target.api,
            max_tokens=scn.output.max_tokens,
            temperature=scn.output.temperature,
            ignore_eos=scn.output.ignore_eos,
            first_token_timeout_s=scn.target.timeouts.first_token_s,
            total_timeout_s=scn.target.timeouts.total_s,
            extra_body={**adapter.extra_body, **pin_slot(scn), **opts.extra_body},
        )
        client = StreamingClient(cfg, session, origin_ns, headers)
        rd = RunDir(run_path, run_id)
        (run_path / SCENARIO).write_text(scenario_to_yaml(scn, redact=True), encoding="utf-8")
        rd.manifest = {
            "kvbench_version": __version__,
            "run_id": run_id,
            "run_dir": str(run_path),
            "scenario_name": scn.name,
            "test": scn.test,
            "status": "running",
            "started_at": utc_now_iso(),
            "ended_at": None,
            "clock_origin_ns": origin_ns,
            "target": target.manifest(),
            "simulated": mock is not None,
            "reference": scn.reference,
            "environment": environment(),
            "options": {
                "allow_unverified_cold": opts.allow_unverified_cold,
                "retries": scn.retries,
                "api_key_env": opts.api_key_env or scn.target.api_key_env,
                "max_error_rate": scn.max_error_rate,
            },
            "phases": [],
            "error_counts": {},
        }
        rd.save_manifest()
        run = Run(scn, opts, rd, target, http, client, adapter, origin_ns)
        status = "failed"
        try:
            run.progress.log(
                f"kvbench {__version__}: {scn.name} against {target.kind} {base_url} "
                f"(model {model}, engine {engine}) -> {run_path}"
            )
            prompts = await make_prompt_set(run)
            rd.manifest["cold_start"] = await run.verify_cold_start()
            if scn.test == "ttft":
                await run_ttft(run, prompts)
            else:
                await run_throughput(run, prompts)
            status = "complete"
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except KvbenchError as exc:
            rd.manifest["error"] = exc.message
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                status = "interrupted"
            else:
                rd.manifest["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            rd.manifest["status"] = status
            rd.manifest["ended_at"] = utc_now_iso()
            rd.manifest["error_counts"] = dict(run.error_counts)
            rd.manifest["requests"] = len(run.records)
            rd.manifest.update(client.clock_manifest())
            (run_path / METRIC_DELTAS).write_text(_json(run.metric_deltas), encoding="utf-8")
            rd.save_manifest()
            rd.close()
            if run.noise_writer is not None:
                run.noise_writer.close()
            if run.scraper.writer is not None:
                run.scraper.writer.close()
    measured = [r for r in run.records if r.phase != "probe"]
    failed = sum(not r.ok for r in measured)
    rate = failed / len(measured) if measured else 0.0
    exit_code = 0 if rate <= scn.max_error_rate else 1
    lines = list(run.summary_lines)
    if exit_code:
        lines.append(
            f"{failed} of {len(measured)} requests failed ({rate:.1%} > max_error_rate "
            f"{scn.max_error_rate:.1%}): {dict(run.error_counts)}"
        )
    return RunOutcome(run_path, status, exit_code, dict(run.error_counts), len(measured), lines)


async def make_prompt_set(run: Run) -> list[Prompt]:
    scn = run.scn
    spec = scn.prompts.lengths
    count = scn.prompts.resolved_count()
    lengths = resolve_lengths(
        spec if isinstance(spec, list) else (spec.min, spec.max, spec.distribution), count, scn.prompts.seed
    )
    counter = await server_token_counter(run.http, run.target.model, run.target.engine, scn.target.api)
    run.token_counter = bounded_counter(counter) if counter else None
    t0 = time.perf_counter()
    prompts = await build_prompts(
        lengths,
        seed=scn.prompts.seed,
        shared_prefix_tokens=scn.prompts.shared_prefix_tokens,
        counter=run.token_counter,
        sample_salt=make_salt(np.random.default_rng(0)) if scn.prompts.salt != "none" else "",
        tolerance=scn.prompts.tolerance_tokens,
    )
    elapsed = time.perf_counter() - t0
    with run.rd.writer(PROMPTS) as w:
        for p in prompts:
            w.write(p.row(""))
    off = [
        p
        for p in prompts
        if p.actual_tokens is not None
        and abs(p.actual_tokens - p.requested_tokens) > scn.prompts.tolerance_tokens
    ]
    run.rd.manifest["prompts"] = {
        "count": len(prompts),
        "build_s": round(elapsed, 3),
        "count_source": prompts[0].count_source if prompts else None,
        "counted_as": "chat message with template"
        if getattr(counter, "counts_chat", False)
        else "raw text (a chat template adds its tokens on top)"
        if scn.target.api == "chat"
        else "raw text",
        "outside_tolerance": len(off),
    }
    run.progress.log(
        f"built {len(prompts)} prompts ({sum(lengths):,} tokens) in {elapsed:.1f}s, "
        f"lengths counted by {'the server' if counter else 'estimate (no /tokenize)'}"
    )
    return prompts


def _json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2) + "\n"
