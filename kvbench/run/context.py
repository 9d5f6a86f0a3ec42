"""The state one run shares across its phases: options, target, client, run directory, and
how a request is issued, recorded and retried; how a cold start is verified."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvbench.client import ClientConfig, RequestRecord, StreamingClient, build_body, burst_warning
from kvbench.client.control import ControlClient
from kvbench.engines.adapters import EngineAdapter
from kvbench.engines.telemetry import counter_deltas, sum_delta
from kvbench.errors import ColdUnverified
from kvbench.lab.manifest import lab_link_interfaces
from kvbench.load.backends import LoadBackend, load_backend
from kvbench.load.prompts import Prompt, TokenCounter, make_salt
from kvbench.load.worker_phase import NOT_SENT, WORKER_LOST
from kvbench.results import JsonlWriter, RunDir
from kvbench.results.schema import Label, PhaseEntry, TtftStep
from kvbench.run.console.live import TappedScraper
from kvbench.run.console.progress import Progress
from kvbench.run.preflight.cold import cold_probe_verdict, reset_cache
from kvbench.run.preflight.limits import CLIENT_LIMIT, client_limit_message, is_client_limit
from kvbench.run.preflight.target import TargetInfo
from kvbench.scenario import Scenario
from kvbench.telemetry.sampler import build_sampler


@dataclass
class RunOptions:
    output_dir: Path = Path("results")
    quiet: bool = False
    allow_unverified_cold: bool = False
    api_key_env: str | None = None
    report: bool = True
    mock_persist_dir: Path | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    load_backend: str = "local"  # where phase workers run (kvbench.load.backends.BACKENDS)
    metrics: Any = None  # --serve-metrics: a kvbench.telemetry.serve_metrics.RunMetrics, fed per row


class Run:
    """State shared by the phases of one run."""

    def __init__(
        self,
        scn: Scenario,
        opts: RunOptions,
        rd: RunDir,
        target: TargetInfo,
        http: ControlClient,
        client: StreamingClient,
        adapter: EngineAdapter,
        origin_ns: int,
    ) -> None:
        self.scn, self.opts, self.rd, self.target = scn, opts, rd, target
        self.http, self.client, self.adapter, self.origin_ns = http, client, adapter, origin_ns
        self.progress = Progress(quiet=opts.quiet, metrics=opts.metrics)
        self.salt_rng = np.random.default_rng()  # unseeded on purpose: a salt must never repeat across runs
        self.progress.tiers.counters = adapter.transfer_counters if adapter is not None else ()
        engine = TappedScraper(  # its samples also feed the live view's tier GB/s
            http,
            rd.writer("metrics.jsonl") if scn.telemetry.metrics == "auto" else None,
            origin_ns,
            enabled=scn.telemetry.metrics == "auto",
            tap=self.progress.scraped,
        )
        after = getattr(getattr(scn.test, "between_phases", None), "base_url", None)
        # a lab target: its link's counters too (no target: a pipeline test's fake client)
        links = lab_link_interfaces(target.base_url, after) if target is not None else ()
        self.scraper = build_sampler(engine, scn.telemetry, rd.path, self.progress.log, links)
        self.error_counts: Counter[str] = Counter()
        self.records: list[RequestRecord] = []
        self.noise_writer: JsonlWriter | None = None  # opened by the first noisy phase
        self.metric_deltas: dict[str, dict[str, float]] = {}
        self.summary_lines: list[str] = []
        self.token_counter: TokenCounter | None = None
        self.seq = 0
        self.load_backend: LoadBackend = _load_backend(scn, opts.load_backend)

    # -- one request ---------------------------------------------------------------------------------

    async def issue(
        self,
        *,
        phase: str,
        label: Label,
        rep: int,
        prompt: Prompt,
        text: str,
        scheduled_ns: int | None = None,
        noise_active: bool = False,
        max_tokens: int | None = None,
        body: bytes | None = None,
    ) -> RequestRecord:
        self.seq += 1
        if body is None:  # a test that builds its own body (sessions: a chat history) passes it
            body = build_body(
                self.client.cfg if max_tokens is None else with_max_tokens(self.client.cfg, max_tokens), text
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
                    self.record(rec)
            if final:
                return rec
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))

    def record(self, rec: RequestRecord, extra: dict[str, Any] | None = None) -> None:
        """Write a request's row (plus `extra` columns: a remote worker's name and node) and count it."""
        if not rec.ok and is_client_limit(rec.error_type, rec.error_message):
            rec.fail(CLIENT_LIMIT, client_limit_message(rec.error_message or ""))
        self.rd.requests.write({**rec.to_row(), **extra} if extra else rec.to_row())
        self.records.append(rec)
        self.progress.row(rec)
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
            if scn.cache.reset != "never":  # detected or named alike: no silent unverified run
                self._unverified(info)
            return info
        info["method"] = "salt+reset"
        if scn.cache.verify == "off":
            info["reset"] = await self.reset()
            return info
        probe_prompt = Prompt(-1, 512, " ".join(["probe"] + [make_salt(self.salt_rng) for _ in range(85)]))
        for attempt in range(3):
            text = probe_prompt.body
            first = await self.issue(
                phase="probe", label=Label.PROBE, rep=attempt, prompt=probe_prompt, text=text, max_tokens=1
            )
            ok, detail = await reset_cache(self.adapter, self.http)
            before = await self.scraper.scrape("probe")
            rec = await self.issue(
                phase="probe", label=Label.PROBE, rep=attempt, prompt=probe_prompt, text=text, max_tokens=1
            )
            after = await self.scraper.scrape("probe")
            hits: float | None = None
            if before is not None and after is not None:
                hits = sum_delta(counter_deltas(before, after), self.adapter.hit_counters)
            info.update(reset=ok, detail=detail, probe_cached_tokens=rec.cached_tokens, probe_hit_delta=hits)
            if not ok:
                break
            # both probes must answer: a failed first one cached nothing, so a clean second proves nothing
            info["verified"], why = cold_probe_verdict(first, rec, hits)
            if info["verified"]:
                return info
            info["detail"] = why
            if info["verified"] is None and first.ok and rec.ok:
                break  # no signal to read: asking again cannot help
        self._unverified(info)
        return info

    def _unverified(self, info: dict[str, Any]) -> None:
        """Stop a run whose cold start is unverified when cache.verify is required (unless allowed)."""
        if self.scn.cache.verify != "required":
            return
        if self.opts.allow_unverified_cold:
            self.progress.log(f"cold start not verified ({info['detail']}); running: --allow-unverified-cold")
            return
        named = (
            ""
            if self.scn.target.engine != "auto"
            else f" (detected as '{self.adapter.engine}'; --engine names it)"
        )
        raise ColdUnverified(
            f"cannot verify a cold cache: {info['detail']}{named}. Use --allow-unverified-cold to run anyway "
            f"(recorded in the manifest), or set cache.verify: best_effort"
        )

    # -- phases ----------------------------------------------------------------------------------------

    def add_ttft_steps(self, steps: list[TtftStep]) -> None:
        manifest = self.rd.manifest
        assert manifest is not None
        self.rd.manifest = manifest.replace(ttft_steps=[*(manifest.ttft_steps or []), *steps])

    def add_phase(self, entry: PhaseEntry) -> None:
        """Record a finished phase in the manifest and rewrite it (a killed run keeps what it did)."""
        manifest = self.rd.manifest
        assert manifest is not None
        self.rd.manifest = manifest.with_phase(entry)
        self.rd.save_manifest()

    async def phase_boundary(self, name: str) -> dict[Any, float] | None:
        self.rd.save_manifest()
        return await self.scraper.scrape(name)

    def end_metrics(self, name: str, before: dict[Any, float] | None, after: dict[Any, float] | None) -> None:
        if before is not None and after is not None:
            self.metric_deltas[name] = counter_deltas(before, after)


def _load_backend(scn: Scenario, default: str) -> LoadBackend:
    """Who sends the load: this process (`default`), K worker processes, or K Ray actors."""
    load = scn.load  # load.pin with Ray, or without workers, is refused by the scenario's validation
    if not load.workers:
        return load_backend(default)
    # a worker silent for longer than a connect may take is stopped or frozen, on either backend
    # (kvbench.load.worker_phase.silence_bound)
    silence_s = scn.target.timeouts.connect_s
    if scn.cluster.backend == "ray":
        return load_backend("ray", workers=load.workers, silence_s=silence_s)
    return load_backend("processes", workers=load.workers, pin=load.pin, silence_s=silence_s)


def with_max_tokens(cfg: ClientConfig, max_tokens: int) -> ClientConfig:
    from dataclasses import replace

    return replace(cfg, max_tokens=max_tokens)


def phase_entry(
    run: Run, name: str, label: Label, rep: int, started_ns: int, ended: int | None = None, **extra: Any
) -> PhaseEntry:
    ended = run.client.now() if ended is None else ended
    recs = [r for r in run.records if r.phase == name and r.repetition == rep]
    ok = sum(r.ok for r in recs)
    duration = (ended - started_ns) / 1e9
    burst = burst_warning(recs)
    if burst:  # a buffering proxy makes TTFT read as the whole request: say so
        run.progress.log(f"{name}: warning: {burst}")
        extra["warning_burst"] = burst
    return PhaseEntry(
        name=name,
        label=label,
        repetition=rep,
        started_ns=started_ns,
        ended_ns=ended,
        duration_s=duration,
        requests=len(recs),
        errors=len(recs) - ok,
        requests_ok_per_s=ok / duration if duration > 0 else 0.0,
        **extra,
    )


def with_base(cfg: ClientConfig, base_url: str) -> ClientConfig:
    from dataclasses import replace

    return replace(cfg, base_url=base_url)


def lost_worker_cause(run: Run) -> str | None:
    """A load worker lost mid-phase (died, or silent past its bound): the run measured another load,
    so it failed; the cause is the lost worker's own line, from its first accounted row."""
    for r in run.records:
        if r.error_type in (WORKER_LOST, NOT_SENT) and r.error_message:
            n = sum(1 for x in run.records if x.error_type in (WORKER_LOST, NOT_SENT))
            return f"{n} requests of a lost load worker: {r.error_message}"
    return None
