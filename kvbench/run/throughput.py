"""The throughput test: baseline, cached, quiet/noisy pairs and the persistence step, as phases."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from kvbench.client.control import ControlClient
from kvbench.errors import KvbenchError, TargetUnreachable, UsageError
from kvbench.load.backends import RemoteLoadBackend
from kvbench.load.prompts import Prompt
from kvbench.load.schedule import WorkItem, work_items
from kvbench.results import NOISE
from kvbench.results.schema import Label, PhaseEntry
from kvbench.run.context import Run, phase_entry, with_base
from kvbench.run.hit_rate import Dial, check_phase, dial_for, fresh_suffix_salt
from kvbench.scenario import Scenario, ThroughputSection

RESTART_MOCK = "@restart-mock"


@dataclass
class PhasePlan:
    name: str
    label: Label
    salt_mode: str  # "run" (new salt, reset) | "request" | "keep" (persistence) | "same" (no reset)
    noisy: bool = False
    repetition: int = 0
    pair: int | None = None  # the quiet/noisy pair it belongs to (1-based)
    settle_s: float = 0.0  # noisy phases: pause once the noise runs (ramp-up) and after the phase (draining)
    dial: str | None = None  # prompts.reuse.hit_rate: "prime" (prefixes) | "measure" (prefix + fresh suffix)


def noisy_plan(test: ThroughputSection, rep: int, sfx: str) -> list[PhasePlan]:
    """Quiet/noisy pairs in order (alternate = ABBA), with the fills the cache start needs."""
    nz = test.noisy
    plans: list[PhasePlan] = []
    filled = nz.cache_start == "filled"
    if filled and not nz.refill:
        plans.append(PhasePlan(f"fill{sfx}", Label.FILL, "run", repetition=rep))
    for k in range(1, nz.resolved_pairs() + 1):
        quiet_first = nz.order == "quiet_first" or (nz.order == "alternate" and k % 2 == 1)
        pair = [
            PhasePlan(f"quiet-{k}{sfx}", Label.QUIET, "same" if filled else "run", repetition=rep, pair=k),
            PhasePlan(
                f"noisy-{k}{sfx}",
                Label.NOISY,
                "same" if filled else "run",
                noisy=True,
                repetition=rep,
                pair=k,
                settle_s=nz.settle_s,
            ),
        ]
        for plan in pair if quiet_first else pair[::-1]:
            if filled and nz.refill:
                # every prompt once, quiet and unmeasured, so the measured phase reads it back
                plans.append(PhasePlan(f"fill-{plan.name}", Label.FILL, "run", repetition=rep, pair=k))
            plans.append(plan)
    return plans


def section(scn: Scenario) -> ThroughputSection:
    assert isinstance(scn.test, ThroughputSection), scn.test.kind
    return scn.test


def throughput_plan(scn: Scenario, restart: bool) -> list[PhasePlan]:
    test = section(scn)
    plans: list[PhasePlan] = []
    for rep in range(scn.repetitions):
        sfx = f"-r{rep + 1}" if scn.repetitions > 1 else ""
        if test.baseline:
            plans.append(PhasePlan(f"baseline{sfx}", Label.BASELINE, "request", repetition=rep))
        if test.noisy.enabled:
            plans.extend(noisy_plan(test, rep, sfx))
        else:
            reuse = scn.prompts.reuse
            primed = bool(reuse.hit_rate and reuse.prime)  # the prime keeps its salt for the measured phase
            if primed:
                plans.append(PhasePlan(f"prime{sfx}", Label.FILL, "run", repetition=rep, dial="prime"))
            dialled = "measure" if reuse.hit_rate is not None else None
            mode = "same" if primed else "run"
            plans.append(PhasePlan(f"cached{sfx}", Label.CACHED, mode, repetition=rep, dial=dialled))
            if restart:
                plans.append(PhasePlan(f"after-restart{sfx}", Label.PERSISTED, "keep", repetition=rep))
    return plans


async def run_throughput(run: Run, prompts: list[Prompt]) -> None:
    scn = run.scn
    items = work_items(scn.load, len(prompts))
    test = section(scn)
    restart = bool(test.between_phases.command or test.between_phases.base_url)
    salt = run.new_salt()
    results: list[PhaseEntry] = []
    fill_items = [WorkItem(i, i) for i in range(len(prompts))]
    dial = dial_for(run)
    for plan in throughput_plan(scn, restart):
        if plan.salt_mode == "keep":
            await between_phases(run)
        elif plan.salt_mode != "same":
            salt = run.new_salt()
            await run.reset()
        phase_items = fill_items if plan.label == Label.FILL else items
        results.append(await run_phase(run, plan, prompts, phase_items, salt, dial))
        if plan.settle_s:
            await asyncio.sleep(plan.settle_s)
    run.summary_lines = throughput_table(results)


async def run_phase(
    run: Run,
    plan: PhasePlan,
    prompts: list[Prompt],
    items: list[WorkItem],
    salt: str,
    dial: Dial | None = None,
) -> PhaseEntry:
    scn = run.scn
    run.progress.start_phase(plan.name, len(items))
    before = await run.phase_boundary(plan.name)
    texts = [p.with_salt(salt) for p in prompts] if plan.salt_mode != "request" else None

    async def issue(item: WorkItem, scheduled_ns: int) -> None:
        prompt = prompts[item.prompt_id]
        text = texts[item.prompt_id] if texts is not None else prompt.with_salt(run.new_salt())
        if dial is not None and plan.dial == "prime":
            text = dial.prime_text(prompt, salt)
        elif dial is not None and plan.dial == "measure":
            text = dial.measured_text(prompt, salt, fresh_suffix_salt(run))
        await run.issue(
            phase=plan.name,
            label=plan.label,
            rep=plan.repetition,
            prompt=prompt,
            text=text,
            scheduled_ns=scheduled_ns,
            noise_active=plan.noisy,
            max_tokens=getattr(prompt, "output_tokens", None),  # a dataset's own answer length
        )

    work: Any = issue
    backend = run.load_backend
    if isinstance(backend, RemoteLoadBackend):  # the requests are sent elsewhere (Ray workers)
        if plan.dial:
            raise UsageError("prompts.reuse.hit_rate: not with remote load workers yet")
        from kvbench.run.remote import RunPhase

        work = RunPhase(
            run,
            name=plan.name,
            label=plan.label,
            repetition=plan.repetition,
            noisy=plan.noisy,
            prompts=prompts,
            texts=texts,
        )
        # workers up before the noise (whose placement then avoids their nodes) and the phase clock
        await backend.ready(work, run.origin_ns)
    async with noise_for(run, plan) as noise:
        started = run.client.now()  # after the noise is up: its start-up is not phase time
        run.progress.sending(noise)  # the live view's noise GB/s (kvbench.run.console.live)
        async with run.scraper.during(plan.name, scn.telemetry.interval_s):
            try:
                await run.load_backend.run(scn.load, items, work)
            finally:
                run.progress.end_phase()
            ended = run.client.now()  # before the sampler's closing read, which is not phase time
    noise_summary = noise.summary() if noise is not None else None  # final totals, after it stopped
    after = await run.scraper.scrape(plan.name)
    run.end_metrics(plan.name, before, after)
    remote = backend.phases if isinstance(backend, RemoteLoadBackend) else None
    if remote:  # the span the workers sent in: from their common start to the last row's end
        started = remote[-1].get("started_ns") or started
        ended = remote[-1].get("ended_ns") or ended
    extra: dict[str, Any] = {"pair": plan.pair} if plan.pair is not None else {}
    if dial is not None and plan.dial == "measure":
        extra["hit_rate"] = check_phase(run, dial, plan.name, plan.repetition, prompts, salt)
    entry = phase_entry(
        run,
        plan.name,
        plan.label,
        plan.repetition,
        started,
        ended=ended,
        noise=noise_summary,
        load_backend=remote[-1] if remote else None,
        **extra,
    )
    run.add_phase(entry)
    for w in (entry.load_backend or {}).get("workers", []):
        if w["state"] == "lost":
            run.progress.log(
                f"load: {w['worker']} on {w['hostname']} was lost: {w['lost_in_flight']} requests in flight "
                f"recorded as worker_lost, {w['not_issued']} never issued ({w['error']})"
            )
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
        run.noise_writer = run.rd.writer(NOISE)
    async with noise_generator(
        run.scn.noise,
        phase=plan.name,
        writer=run.noise_writer,
        origin_ns=run.origin_ns,
        default_targets=defaults,
        cluster=run.scn.cluster.backend,
    ) as handle:
        if plan.settle_s:  # let the target's view of the noise ramp up before the phase's clock starts
            await asyncio.sleep(plan.settle_s)
        yield handle


async def between_phases(run: Run) -> None:
    """The persistence test: restart the server (or move to another) between fill and measure."""
    bp = section(run.scn).between_phases
    if bp.command == RESTART_MOCK:
        if run.target.mock is None:
            raise KvbenchError(
                f"between_phases.command: {RESTART_MOCK} needs the embedded mock (no --base-url)"
            )
        run.progress.log("restarting the embedded mock (G4 persisted on disk)")
        await run.target.mock.restart()
        run.http.base_url = run.target.mock.base_url
        run.client.cfg = with_base(run.client.cfg, run.target.mock.base_url)
    elif bp.command:
        run.progress.log(f"between phases: {bp.command}")
        proc = await asyncio.create_subprocess_shell(bp.command)
        rc = await proc.wait()
        if rc != 0:
            raise KvbenchError(f"between_phases.command exited with {rc}: {bp.command}")
    if bp.base_url:
        run.http.base_url = bp.base_url.rstrip("/")
        run.client.cfg = with_base(run.client.cfg, run.http.base_url)
    await wait_healthy(run.http, bp.wait_healthy_s)
    manifest = run.rd.manifest
    if manifest is not None:
        run.rd.update(target=manifest.target.model_copy(update={"base_url_after": run.http.base_url}))


async def wait_healthy(http: ControlClient, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            status, _ = await http.request("GET", "/v1/models")
            if status == 200:
                return
        if time.monotonic() > deadline:
            raise TargetUnreachable(f"{http.base_url} did not become healthy within {timeout_s:g} s")
        await asyncio.sleep(0.5)


def throughput_table(entries: list[PhaseEntry]) -> list[str]:
    lines = [f"{'phase':<16} {'requests':>8} {'errors':>6} {'total s':>9} {'req/s':>8} {'noise GB/s':>10}"]
    for e in entries:
        noise = e.noise or {}
        rate = noise.get("mean_bytes_per_s")
        lines.append(
            f"{e.name:<16} {e.requests:>8} {e.errors:>6} {e.duration_s or 0.0:>9.2f} "
            f"{e.requests_ok_per_s or 0.0:>8.3f} {('-' if rate is None else f'{rate / 1e9:.3f}'):>10}"
        )
    return lines
