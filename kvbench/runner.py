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
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvbench import __version__
from kvbench.cache import ADAPTERS, CacheAdapter, TargetHTTP, reset_cache
from kvbench.client import ClientConfig, RequestRecord, StreamingClient, build_body, make_session
from kvbench.errors import KvbenchError, TargetUnreachable
from kvbench.load import WorkItem, run_load, work_items
from kvbench.progress import Progress
from kvbench.prompts import Prompt, TokenCounter, bounded_counter, build_prompts, make_salt, resolve_lengths
from kvbench.results import METRIC_DELTAS, NOISE, PROMPTS, SCENARIO, RunDir, new_run_dir, utc_now_iso
from kvbench.scenario import Scenario, SequentialLoad, scenario_to_yaml
from kvbench.target import TargetInfo, embedded_mock, identify, preflight, request_headers
from kvbench.telemetry import Scraper, counter_deltas, sum_delta
from kvbench.tokenize import server_token_counter

RESTART_MOCK = "@restart-mock"


@dataclass
class RunOptions:
    output_dir: Path = Path("results")
    quiet: bool = False
    allow_unverified_cold: bool = False
    api_key_env: str | None = None
    report: bool = True
    mock_persist_dir: Path | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None  # filled in as soon as the run directory exists


@dataclass
class RunOutcome:
    run_dir: Path
    status: str
    exit_code: int
    error_counts: dict[str, int]
    requests: int
    summary_lines: list[str] = field(default_factory=list)


@dataclass
class PhasePlan:
    name: str
    label: str
    salt_mode: str  # "run" | "request" | "keep"
    noisy: bool = False
    repetition: int = 0


class Run:
    """State shared by the phases of one run."""

    def __init__(
        self,
        scn: Scenario,
        opts: RunOptions,
        rd: RunDir,
        target: TargetInfo,
        http: TargetHTTP,
        client: StreamingClient,
        adapter: CacheAdapter,
        origin_ns: int,
    ) -> None:
        self.scn, self.opts, self.rd, self.target = scn, opts, rd, target
        self.http, self.client, self.adapter, self.origin_ns = http, client, adapter, origin_ns
        self.progress = Progress(quiet=opts.quiet)
        self.salt_rng = np.random.default_rng()  # unseeded on purpose: a salt must never repeat across runs
        self.scraper = Scraper(
            http,
            rd.writer("metrics.jsonl") if scn.telemetry.metrics == "auto" else None,
            origin_ns,
            enabled=scn.telemetry.metrics == "auto",
        )
        self.error_counts: Counter[str] = Counter()
        self.records: list[RequestRecord] = []
        self.noise_writer = None
        self.metric_deltas: dict[str, dict[str, float]] = {}
        self.summary_lines: list[str] = []
        self.token_counter: TokenCounter | None = None
        self.seq = 0

    # -- one request ---------------------------------------------------------------------------------

    async def issue(
        self,
        *,
        phase: str,
        label: str,
        rep: int,
        prompt: Prompt,
        text: str,
        scheduled_ns: int | None = None,
        noise_active: bool = False,
        max_tokens: int | None = None,
    ) -> RequestRecord:
        self.seq += 1
        body = build_body(
            self.client.cfg if max_tokens is None else _with_max_tokens(self.client.cfg, max_tokens), text
        )
        attempt = 0
        while True:
            attempt += 1
            rec = RequestRecord(
                request_id=f"{self.rd.run_id[-6:]}-{phase}-{self.seq}",
                phase=phase,
                label=label,
                repetition=rep,
                prompt_id=prompt.prompt_id,
                prompt_tokens_requested=prompt.requested_tokens,
                prompt_tokens=prompt.actual_tokens or prompt.requested_tokens,
                scheduled_ns=(scheduled_ns - self.origin_ns) if scheduled_ns else None,
                noise_active=noise_active,
                attempt=attempt,
            )
            if rec.scheduled_ns is None:
                rec.scheduled_ns = self.client.now()
            self.progress.request_started()
            final = True
            try:
                await self.client.send(rec, body)
                final = rec.ok or attempt > self.scn.retries
            finally:
                self.progress.request_done(rec.ok)
                if final or rec.status == "cancelled":
                    self._record(rec)
            if final:
                return rec
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))

    def _record(self, rec: RequestRecord) -> None:
        self.rd.requests.write(rec.to_row())
        self.records.append(rec)
        if not rec.ok:
            self.error_counts[rec.error_type or "unknown"] += 1
            if len(self.error_counts) == 1 and sum(self.error_counts.values()) == 1:
                self.progress.log(f"first failed request: {rec.error_type}: {rec.error_message}")

    # -- cache -----------------------------------------------------------------------------------------

    def new_salt(self) -> str:
        return "" if self.scn.prompts.salt == "none" else make_salt(self.salt_rng)

    async def reset(self) -> bool | None:
        """Reset the server's prefix cache if the scenario and engine allow; None when not attempted."""
        if self.scn.cache.reset == "never" or not self.adapter.can_reset:
            return None
        ok, detail = await reset_cache(self.adapter, self.http)
        if not ok:
            self.progress.log(f"cache reset failed: {detail}")
        return ok

    async def verify_cold_start(self) -> dict[str, Any]:
        """Probe that a reset really empties the cache: send, reset, send again -> nothing cached."""
        scn = self.scn
        info: dict[str, Any] = {"method": "salt", "reset": None, "verified": None, "detail": ""}
        if scn.cache.initial != "cold":
            info["method"] = "as_is"
            return info
        if scn.cache.reset == "never" or not self.adapter.can_reset:
            info["detail"] = f"engine '{self.adapter.engine}' has no reset; cold by per-run salt only"
            return info
        info["method"] = "salt+reset"
        if scn.cache.verify == "off":
            info["reset"] = await self.reset()
            return info
        probe_prompt = Prompt(-1, 512, " ".join(["probe"] + [make_salt(self.salt_rng) for _ in range(85)]))
        for attempt in range(3):
            text = probe_prompt.body
            await self.issue(
                phase="probe", label="probe", rep=attempt, prompt=probe_prompt, text=text, max_tokens=1
            )
            ok, detail = await reset_cache(self.adapter, self.http)
            before = await self.scraper.scrape("probe")
            rec = await self.issue(
                phase="probe", label="probe", rep=attempt, prompt=probe_prompt, text=text, max_tokens=1
            )
            after = await self.scraper.scrape("probe")
            hits: float | None = None
            if before is not None and after is not None:
                hits = sum_delta(counter_deltas(before, after), self.adapter.hit_counters)
            info.update(reset=ok, detail=detail, probe_cached_tokens=rec.cached_tokens, probe_hit_delta=hits)
            if not ok:
                break
            if rec.cached_tokens == 0 or (rec.cached_tokens is None and hits == 0):
                info["verified"] = True
                return info
            if rec.cached_tokens is None and hits is None:
                info["verified"] = None
                info["detail"] = "server reports neither cached_tokens nor a hit counter; cannot verify"
                break
            info["verified"] = False
        if scn.cache.verify == "required" and not self.opts.allow_unverified_cold:
            why = (
                info["detail"]
                if not info.get("reset")
                else (
                    f"after a reset the probe still showed cached_tokens={info.get('probe_cached_tokens')} "
                    f"hit delta={info.get('probe_hit_delta')}"
                )
            )
            raise ColdUnverified(
                f"cannot verify a cold cache: {why}. Use --allow-unverified-cold to run anyway "
                f"(recorded in the manifest), or set cache.verify: best_effort"
            )
        return info

    # -- phases ----------------------------------------------------------------------------------------

    async def phase_boundary(self, name: str) -> dict[Any, float] | None:
        self.rd.save_manifest()
        return await self.scraper.scrape(name)

    def end_metrics(self, name: str, before: dict[Any, float] | None, after: dict[Any, float] | None) -> None:
        if before is not None and after is not None:
            self.metric_deltas[name] = counter_deltas(before, after)


class ColdUnverified(KvbenchError):
    exit_code = 1


def _with_max_tokens(cfg: ClientConfig, max_tokens: int) -> ClientConfig:
    from dataclasses import replace

    return replace(cfg, max_tokens=max_tokens)


# --- test plans -------------------------------------------------------------------------------------------


async def run_ttft(run: Run, prompts: list[Prompt]) -> None:
    scn = run.scn
    rows: list[dict[str, Any]] = []
    for rep in range(scn.repetitions):
        phase = "ttft"
        run.progress.start_phase(
            f"ttft rep {rep + 1}/{scn.repetitions}", len(prompts) * (1 + scn.cache.warm_repeats)
        )
        before = await run.phase_boundary(phase)
        started = run.client.now()
        for prompt in prompts:
            salt = run.new_salt()
            text = prompt.with_salt(salt)
            reset_ok = await run.reset()
            cold = await run.issue(phase=phase, label="cold", rep=rep, prompt=prompt, text=text)
            verified = cold.cached_tokens == 0 if cold.cached_tokens is not None else None
            evicted = await evict(run, rep, prompt)
            warm_label = "evicted-warm" if evicted is not None else "warm"
            warms = []
            for _ in range(scn.cache.warm_repeats):
                warms.append(
                    await run.issue(phase=phase, label=warm_label, rep=rep, prompt=prompt, text=text)
                )
            rows.append({**_ttft_row(prompt, cold, warms, verified, reset_ok), **(evicted or {})})
        run.progress.end_phase()
        after = await run.scraper.scrape(phase)
        run.end_metrics(phase if scn.repetitions == 1 else f"{phase}-{rep + 1}", before, after)
        run.rd.manifest["phases"].append(
            _phase_entry(
                run,
                phase,
                "ttft",
                rep,
                started,
                cold_verified=all(r["verified"] is True for r in rows if r["rep"] == rep) if rows else None,
            )
        )
        run.rd.manifest.setdefault("ttft_steps", []).extend(r for r in rows if r["rep"] == rep)
        run.rd.save_manifest()
    run.summary_lines = ttft_table(rows)


async def evict(run: Run, rep: int, current: Prompt) -> dict[str, Any] | None:
    """Between cold and warm, push the prompt's KV out of the fast tiers; None when not asked to."""
    mode = run.scn.cache.eviction
    if mode == "none":
        return None
    if mode == "tier_reset":
        status, body = await run.http.request("POST", "/reset_prefix_cache?tiers=G1,G2")
        if status >= 400 or (isinstance(body, dict) and body.get("success") is False):
            raise KvbenchError(f"cache.eviction=tier_reset: the server refused a tier reset (HTTP {status})")
        return {"eviction": mode}
    if mode == "slot_file":
        return await slot_file_round_trip(run, current)
    total = run.scn.cache.filler_tokens or 2 * current.requested_tokens
    n = max(1, -(-total // max(current.requested_tokens, 1)))
    fillers = await build_prompts(
        [current.requested_tokens] * n,
        seed=run.scn.prompts.seed + 7919 + rep,
        counter=run.token_counter,
        sample_salt=make_salt(np.random.default_rng(1)),
    )
    for f in fillers:
        filler = Prompt(-2, f.requested_tokens, f.body, f.actual_tokens)
        await run.issue(
            phase="ttft", label="filler", rep=rep, prompt=filler, text=filler.with_salt(run.new_salt())
        )
    return {"eviction": mode, "filler_requests": n}


async def slot_file_round_trip(run: Run, current: Prompt) -> dict[str, Any]:
    """llama.cpp's disk tier: save slot 0's KV to a file, erase the slot, restore it from the file.

    The restore is its own HTTP call, so it is NOT inside the evicted-warm TTFT that follows:
    it is recorded beside it (restore_ms from the server, restore_client_ms end to end), and the
    TTFT table's disk figure is warm TTFT + restore.
    """
    if run.target.engine != "llamacpp":
        raise KvbenchError(
            f"cache.eviction=slot_file: needs llama.cpp's slot save/restore (engine is {run.target.engine})"
        )
    from kvbench.engines.tiers import SlotActionError, disk_round_trip

    filename = f"kvbench-{run.rd.run_id}-{current.prompt_id}.bin"
    try:
        trip = await disk_round_trip(run.client.session, run.http.base_url, 0, filename)
    except SlotActionError as exc:
        raise KvbenchError(
            f"cache.eviction=slot_file: {exc} (start llama-server with --slot-save-path)"
        ) from None
    return {"eviction": "slot_file", "slot_file": filename, **trip}


def _ttft_row(
    prompt: Prompt,
    cold: RequestRecord,
    warms: list[RequestRecord],
    verified: bool | None,
    reset_ok: bool | None,
) -> dict[str, Any]:
    def ttft(r: RequestRecord) -> float | None:
        return None if r.first_token_ns is None or r.sent_ns is None else (r.first_token_ns - r.sent_ns) / 1e9

    warm_ttfts = [t for t in (ttft(w) for w in warms) if t is not None]
    warm = min(warm_ttfts) if warm_ttfts else None
    cold_t = ttft(cold)
    match = None
    if warms and cold.ok and all(w.ok for w in warms):
        match = all(w.output_text == cold.output_text for w in warms)
    return {
        "rep": cold.repetition,
        "prompt_id": prompt.prompt_id,
        "tokens": prompt.requested_tokens,
        "cold_ttft_s": cold_t,
        "warm_ttft_s": warm,
        "speedup": (cold_t / warm) if cold_t and warm else None,
        "cold_cached_tokens": cold.cached_tokens,
        "warm_cached_tokens": warms[-1].cached_tokens if warms else None,
        "verified": verified,
        "reset": reset_ok,
        "outputs_match": match,
    }


def ttft_table(rows: list[dict[str, Any]]) -> list[str]:
    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    disk = any(r.get("restore_client_ms") is not None for r in rows)
    head = (
        f"{'tokens':>8} {'cold TTFT s':>12} {'warm TTFT s':>12} {'speedup':>8} {'cached':>8} "
        f"{'cold verified':>14} {'same output':>11}"
    )
    lines = [head + (f" {'warm+restore s':>15}" if disk else "")]
    for r in rows:
        verified = {True: "yes", False: "NO", None: "unknown"}[r["verified"]]
        match = {True: "yes", False: "NO", None: "-"}[r["outputs_match"]]
        line = (
            f"{r['tokens']:>8} {f(r['cold_ttft_s'], '.3f'):>12} {f(r['warm_ttft_s'], '.3f'):>12} "
            f"{f(r['speedup'], '.1f'):>7}x {_dash(r['warm_cached_tokens']):>8} "
            f"{verified:>14} {match:>11}"
        )
        if disk:
            # the restore is a separate call, outside the measured TTFT: the disk tier's cost is both
            restore = r.get("restore_client_ms")
            total = None if r["warm_ttft_s"] is None or restore is None else r["warm_ttft_s"] + restore / 1000
            line += f" {f(total, '.3f'):>15}"
        lines.append(line)
    return lines


def _pin_slot(scn: Scenario) -> dict[str, Any]:
    # slot_file saves and restores slot 0: every request must land in it
    return {"id_slot": 0} if scn.cache.eviction == "slot_file" else {}


def _dash(x: Any) -> str:
    return "-" if x is None else str(x)


def throughput_plan(scn: Scenario, restart: bool) -> list[PhasePlan]:
    plans: list[PhasePlan] = []
    for rep in range(scn.repetitions):
        sfx = f"-r{rep + 1}" if scn.repetitions > 1 else ""
        if scn.baseline:
            plans.append(PhasePlan(f"baseline{sfx}", "baseline", "request", repetition=rep))
        if scn.noisy.enabled:
            for k in range(scn.noisy.pairs):
                pair = [
                    PhasePlan(f"quiet-{k + 1}{sfx}", "quiet", "run", repetition=rep),
                    PhasePlan(f"noisy-{k + 1}{sfx}", "noisy", "run", noisy=True, repetition=rep),
                ]
                plans.extend(pair if scn.noisy.order == "quiet_first" else pair[::-1])
        else:
            plans.append(PhasePlan(f"cached{sfx}", "cached", "run", repetition=rep))
            if restart:
                plans.append(PhasePlan(f"after-restart{sfx}", "persisted", "keep", repetition=rep))
    return plans


async def run_throughput(run: Run, prompts: list[Prompt]) -> None:
    scn = run.scn
    items = work_items(scn.load, len(prompts))
    restart = bool(scn.between_phases.command or scn.between_phases.base_url)
    salt = run.new_salt()
    results: list[dict[str, Any]] = []
    for plan in throughput_plan(scn, restart):
        if plan.salt_mode == "keep":
            await between_phases(run)
        else:
            salt = run.new_salt()
            await run.reset()
        results.append(await run_phase(run, plan, prompts, items, salt))
    run.summary_lines = throughput_table(results)


async def run_phase(
    run: Run, plan: PhasePlan, prompts: list[Prompt], items: list[WorkItem], salt: str
) -> dict[str, Any]:
    scn = run.scn
    run.progress.start_phase(plan.name, len(items))
    before = await run.phase_boundary(plan.name)
    texts = [p.with_salt(salt) for p in prompts] if plan.salt_mode != "request" else None

    async def issue(item: WorkItem, scheduled_ns: int) -> None:
        prompt = prompts[item.prompt_id]
        text = texts[item.prompt_id] if texts is not None else prompt.with_salt(run.new_salt())
        await run.issue(
            phase=plan.name,
            label=plan.label,
            rep=plan.repetition,
            prompt=prompt,
            text=text,
            scheduled_ns=scheduled_ns,
            noise_active=plan.noisy,
        )

    async with noise_for(run, plan) as noise:
        started = run.client.now()  # after the noise is up: its start-up is not phase time
        async with run.scraper.during(plan.name, scn.telemetry.interval_s):
            try:
                await run_load(scn.load, items, issue)
            finally:
                run.progress.end_phase()
        ended = run.client.now()
    noise_summary = noise.summary() if noise is not None else None  # final totals, after it stopped
    after = await run.scraper.scrape(plan.name)
    run.end_metrics(plan.name, before, after)
    entry = _phase_entry(
        run, plan.name, plan.label, plan.repetition, started, ended=ended, noise=noise_summary
    )
    run.rd.manifest["phases"].append(entry)
    run.rd.save_manifest()
    if noise_summary and noise_summary.get("warning"):
        run.progress.log(f"noise: {noise_summary['warning']}")
    return entry


@contextlib.asynccontextmanager
async def noise_for(run: Run, plan: PhasePlan) -> AsyncIterator[Any]:
    if not plan.noisy or run.scn.noise.kind == "none":
        yield None
        return
    from kvbench.noise import noise_generator

    defaults: list[str] = []
    mock = run.target.mock
    if mock is not None and getattr(mock, "fabric_address", None):
        host, port = mock.fabric_address
        defaults = [f"{host}:{port}"]
    if run.noise_writer is None:
        run.noise_writer = run.rd.writer(NOISE)  # type: ignore[assignment]
    async with noise_generator(
        run.scn.noise,
        phase=plan.name,
        writer=run.noise_writer,
        origin_ns=run.origin_ns,
        default_targets=defaults,
    ) as handle:
        yield handle


async def between_phases(run: Run) -> None:
    """The persistence test: restart the server (or move to another) between fill and measure."""
    bp = run.scn.between_phases
    if bp.command == RESTART_MOCK:
        if run.target.mock is None:
            raise KvbenchError(
                f"between_phases.command: {RESTART_MOCK} needs the embedded mock (no --base-url)"
            )
        run.progress.log("restarting the embedded mock (G4 persisted on disk)")
        await run.target.mock.restart()
        run.http.base_url = run.target.mock.base_url
        run.client.cfg = _with_base(run.client.cfg, run.target.mock.base_url)
    elif bp.command:
        run.progress.log(f"between phases: {bp.command}")
        proc = await asyncio.create_subprocess_shell(bp.command)
        rc = await proc.wait()
        if rc != 0:
            raise KvbenchError(f"between_phases.command exited with {rc}: {bp.command}")
    if bp.base_url:
        run.http.base_url = bp.base_url.rstrip("/")
        run.client.cfg = _with_base(run.client.cfg, run.http.base_url)
    await wait_healthy(run.http, bp.wait_healthy_s)
    run.rd.manifest["target"]["base_url_after"] = run.http.base_url


def _with_base(cfg: ClientConfig, base_url: str) -> ClientConfig:
    from dataclasses import replace

    return replace(cfg, base_url=base_url)


async def wait_healthy(http: TargetHTTP, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            status, _ = await http.request("GET", "/v1/models")
            if status == 200:
                return
        if time.monotonic() > deadline:
            raise TargetUnreachable(f"{http.base_url} did not become healthy within {timeout_s:g} s")
        await asyncio.sleep(0.5)


def throughput_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'phase':<16} {'requests':>8} {'errors':>6} {'total s':>9} {'req/s':>8} {'noise GB/s':>10}"]
    for e in entries:
        noise = e.get("noise") or {}
        rate = noise.get("mean_bytes_per_s")
        lines.append(
            f"{e['name']:<16} {e['requests']:>8} {e['errors']:>6} {e['duration_s']:>9.2f} "
            f"{e['requests_ok_per_s']:>8.3f} {('-' if rate is None else f'{rate / 1e9:.3f}'):>10}"
        )
    return lines


def _phase_entry(
    run: Run, name: str, label: str, rep: int, started_ns: int, ended: int | None = None, **extra: Any
) -> dict[str, Any]:
    ended = run.client.now() if ended is None else ended
    recs = [r for r in run.records if r.phase == name and r.repetition == rep]
    ok = sum(r.ok for r in recs)
    duration = (ended - started_ns) / 1e9
    return {
        "name": name,
        "label": label,
        "repetition": rep,
        "started_ns": started_ns,
        "ended_ns": ended,
        "duration_s": duration,
        "requests": len(recs),
        "errors": len(recs) - ok,
        "requests_ok_per_s": ok / duration if duration > 0 else 0.0,
        **extra,
    }


# --- the whole run ------------------------------------------------------------------------------------------


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
            extra_body={**adapter.extra_body, **_pin_slot(scn), **opts.extra_body},
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
    counter = await server_token_counter(run.http, run.target.model, run.target.engine)
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


def is_sequential(scn: Scenario) -> bool:
    return isinstance(scn.load, SequentialLoad)
