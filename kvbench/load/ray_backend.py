"""Load on a Ray cluster: K worker actors, each sending its share of a phase with kvbench's client.

The driver keeps everything that is not sending: the prompts and bodies (prepared by the phase,
so request ids stay unique across workers), cold-start verification, cache resets and /metrics,
and the run directory. Per phase:

    split     items dealt round-robin to the K workers; the concurrency (closed loop) or the
              in-flight cap (paced load, whose arrival times are kept) split so that the shares
              add up to the scenario's: in flight across the cluster never exceeds it
    start     each worker gets its share and a common start time on its own clock (the driver's
              start moved through the worker's clock offset, measured when it was created)
    stream    the driver polls each worker on its own (one poll out at a time) a few dozen times a
              second and writes each finished row to requests.jsonl as it arrives, with the
              worker, its node id and hostname; a stopped worker's unanswered poll delays no other
    lost      a worker whose node disappears, or that answers no poll for its silence bound
              (kvbench.load.worker_phase.silence_bound: a stopped or frozen process), is
              recorded: the requests it had started and not finished become rows with error_type
              `worker_lost`; the ones it never sent become `not_sent` rows (so a phase's rows are
              always the requests it was asked for, and the run fails); the other workers finish
    cancel    an interrupted run cancels every worker's requests (they come back `cancelled`)

Workers are created on the first phase and kept for the run (aclose() ends them), so a phase does
not pay for actor start-up. Placement: kvbench.cluster.placement (spread or pack).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbench.cluster import require_ray
from kvbench.cluster.calls import call, is_lost, one_line, settle
from kvbench.cluster.clock import ClockOffset, measure_offset
from kvbench.cluster.placement import (
    NodeInfo,
    Placement,
    alive_nodes,
    is_loopback,
    node_affinity,
    off_this_machine,
    place,
)
from kvbench.errors import UsageError
from kvbench.load.worker_phase import (
    NOT_SENT,
    SILENCE_MIN_S,
    WORKER_LOST,
    PreparedRequest,
    RemotePhase,
    WorkerBook,
    open_phase,
    pack_share,
    silence_bound,
    split_shares,
)

POLL_INTERVAL_S = 0.05
POLL_TIMEOUT_S = 5.0
DRAIN_S = 2.0  # an interrupted phase waits this long for polls already out (a live worker: ms)
START_LEAD_NS = 100_000_000  # the common start: this far after the driver hands out the shares
_ACTOR_CLASS: Any = None

__all__ = [
    "NOT_SENT",
    "SILENCE_MIN_S",
    "WORKER_LOST",
    "PreparedRequest",
    "RayLoadBackend",
    "RemotePhase",
    "split_shares",
]


@dataclass
class _Worker(WorkerBook):
    node: NodeInfo = field(default_factory=lambda: NodeInfo("", "", "", 0.0))
    actor: Any = None
    where: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None

    def extra(self) -> dict[str, Any]:
        return {
            "worker": self.name,
            "node_id": self.where.get("node_id") or self.node.node_id,
            "hostname": self.where.get("hostname") or self.node.hostname,
        }


class RayLoadBackend:
    """The `ray` load backend: `workers` actors placed on the cluster, kept for the whole run."""

    name = "ray"
    remote = True  # the phase passes a RemotePhase, not a coroutine (kvbench.run.throughput)

    def __init__(
        self, workers: int = 2, placement: Placement = "spread", silence_s: float = SILENCE_MIN_S
    ) -> None:
        self.ray = require_ray("load on a Ray cluster")
        if workers < 1:
            raise UsageError("load.workers: at least one load worker")
        self.workers_wanted = workers
        self.placement = placement
        self.silence_s = silence_bound(silence_s)  # unanswered polls for this long: stopped or frozen
        self.workers: list[_Worker] = []
        self.session: Any = None
        self.phases: list[dict[str, Any]] = []  # what each phase's manifest entry records
        self._spec: dict[str, Any] | None = None  # the client spec the workers were opened with
        self._last_end_ns: int | None = None  # this phase's latest row end (driver timeline)
        self._polls: dict[str, asyncio.Future[Any]] = {}  # each worker's poll still unanswered

    # --- workers ----------------------------------------------------------------------------------

    async def _ensure_workers(self, phase: RemotePhase, origin_ns: int) -> None:
        if self.workers:
            return
        from kvbench.cluster import session

        sess = self.session = session.current()
        limits = sess.limits
        plan = place(
            self.workers_wanted,
            alive_nodes(self.ray),
            self.placement,
            cpus_per_client=limits.cpus_per_load_worker,
            avoid=sess.avoid(noise=False),
        )
        sess.load_nodes.update(n.node_id for n in plan)
        _check_reachable(str(phase.client_spec()["config"]["base_url"]), plan)
        actor_class = _actor_class(self.ray)
        for i, node in enumerate(plan):
            w = _Worker(name=f"load-{i}", node=node)
            w.actor = actor_class.options(
                num_cpus=limits.cpus_per_load_worker,
                scheduling_strategy=node_affinity(node.node_id),
                max_restarts=0,
            ).remote(w.name)
            self.workers.append(w)
        wheres = await settle([w.actor.where.remote() for w in self.workers], limits.start_timeout_s)
        for w, where in zip(self.workers, wheres, strict=True):
            if isinstance(where, BaseException):
                w.state, w.error = "failed", f"did not start on {w.node.hostname}: {one_line(where)}"
                continue
            w.where = where
            w.clock = await self._clock(w)
        ready = [w for w in self.workers if w.state == "placed"]
        spec = phase.client_spec()
        opened = await settle(
            [w.actor.open.remote(spec, self._remote_origin(w, origin_ns)) for w in ready],
            limits.start_timeout_s,
        )
        for w, res in zip(ready, opened, strict=True):
            if isinstance(res, BaseException):
                w.state, w.error = "failed", f"could not build its client: {one_line(res)}"
            else:
                w.state = "ready"
        self._spec = spec
        if not any(w.state == "ready" for w in self.workers):
            first = next((w.error for w in self.workers if w.error), "no worker started")
            self._kill_all()
            raise UsageError(f"load: no load worker started on the Ray cluster: {first}")

    async def _follow_client(self, phase: RemotePhase, origin_ns: int) -> None:
        """The target moved (persistence test: a restarted or another server): rebuild the clients."""
        spec = phase.client_spec()
        if spec == self._spec:
            return
        ready = [w for w in self.workers if w.state == "ready"]
        refs = [w.actor.open.remote(spec, self._remote_origin(w, origin_ns)) for w in ready]
        for w, res in zip(ready, await settle(refs, POLL_TIMEOUT_S * 2), strict=True):
            if isinstance(res, BaseException):
                self._lose(w, phase, f"could not rebuild its client: {one_line(res)}")
        self._spec = spec

    @staticmethod
    async def _clock(w: _Worker) -> ClockOffset:
        return await measure_offset(lambda: call(w.actor.clock.remote(), 5.0))

    @staticmethod
    def _remote_origin(w: _Worker, origin_ns: int) -> int:
        """The run's origin on the worker's clock: its rows' stamps then read on the driver's timeline."""
        assert w.clock is not None
        return origin_ns - w.clock.offset_ns

    # --- one phase --------------------------------------------------------------------------------

    async def run(self, load: Any, items: Sequence[Any], issue: Any) -> None:
        """The LoadBackend entry point: `issue` is the phase (a RemotePhase)."""
        await self.run_items(items, int(load.max_in_flight), bool(load.paced), issue, issue.origin_ns)

    async def ready(self, phase: RemotePhase, origin_ns: int) -> None:
        """Workers up and their clients built for this phase's target: called before the phase's
        clock starts, so neither actor start-up nor a rebuilt client counts as phase time."""
        await self._ensure_workers(phase, origin_ns)
        await self._follow_client(phase, origin_ns)

    async def run_items(
        self, items: Sequence[Any], concurrency: int, paced: bool, phase: RemotePhase, origin_ns: int
    ) -> None:
        await self.ready(phase, origin_ns)
        ready, shares, record = open_phase(self.workers, len(items), concurrency, self.phases, "ray")
        self._last_end_ns = None
        bodies: dict[bytes, int] = {}
        starts = []
        for w, (idx, conc) in zip(ready, shares, strict=False):
            prepared = [phase.prepare(items[i]) for i in idx]
            w.new_phase(prepared, conc)
            starts.append((w, pack_share(prepared, bodies)))
        body_list = self.ray.put(list(bodies))  # shipped once, not once per worker
        active = [w for w, _ in starts]
        # the phase's span on the driver's timeline: from the common start (not the hand-out before
        # it) to the last row's end (not the poll that brought it)
        start_driver = time.perf_counter_ns() + START_LEAD_NS  # after the (slow) body preparation
        record["started_ns"] = start_driver - origin_ns
        try:
            refs = [
                w.actor.start.remote(
                    share,
                    body_list,
                    concurrency=w.concurrency,
                    paced=paced,
                    start_ns=start_driver - (w.clock.offset_ns if w.clock else 0),
                    retries=phase.retries,
                )
                for w, share in starts
            ]
            for w, res in zip(active, await settle(refs, POLL_TIMEOUT_S * 2), strict=True):
                if isinstance(res, BaseException):
                    self._lose(w, phase, one_line(res))
            await self._stream(active, phase)
        except asyncio.CancelledError:
            await self._cancel(active, phase)
            raise
        finally:
            self._drop_polls()
            record["ended_ns"] = self._last_end_ns
            record["workers"] = [self._worker_record(w) for w in self.workers]
            record["not_sent"] = sum(w.unsent for w in self.workers)
            record["sent"] = len(items) - record["not_sent"]

    async def _stream(self, active: list[_Worker], phase: RemotePhase) -> None:
        """Poll until every worker is done or lost; write rows as they come.

        Each worker is polled on its own, one poll outstanding at a time: a stopped worker's
        unanswered poll delays nobody else's rows, and is never given up on while the worker is
        kept (its answer holds rows the worker has already handed over); the worker is declared
        lost once it has been silent past the silence bound."""
        due = {w.name: 0.0 for w in active}  # when each worker is next polled
        while live := [w for w in active if w.state == "ready" and not w.done]:
            now = time.monotonic()
            for w in live:
                if w.name not in self._polls and now >= due[w.name]:
                    self._polls[w.name] = asyncio.wrap_future(w.actor.poll.remote().future())
            waiting = [self._polls[w.name] for w in live if w.name in self._polls]
            idle = [due[w.name] - now for w in live if w.name not in self._polls]
            wake = max(0.0, min([POLL_INTERVAL_S, *idle]))  # until the next poll is due, at most
            if waiting:
                await asyncio.wait(waiting, timeout=wake, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(wake)
            now = time.monotonic()
            for w in live:
                if self._answer(w, phase, now):
                    due[w.name] = now + POLL_INTERVAL_S

    def _answer(self, w: _Worker, phase: RemotePhase, now: float) -> bool:
        """Take `w`'s poll answer if it came (True), and declare it lost if it is gone or has been
        silent past the bound; a poll that raised is tried again, the bound deciding."""
        fut = self._polls.get(w.name)
        answered = fut is not None and fut.done()
        if fut is not None and answered:
            del self._polls[w.name]  # the next poll goes out when due
            exc = fut.exception()
            if exc is None:
                self._take(w, fut.result(), phase)
            elif is_lost(exc):
                self._lose(w, phase, one_line(exc))
        if w.state == "ready" and not w.done and now - w.last_answer > self.silence_s:
            silent = f"silent for {now - w.last_answer:.0f} s"
            self._lose(
                w, phase, f"{silent} (no answer to a poll within {self.silence_s:g} s: stopped or frozen)"
            )
        return answered

    async def _drain_polls(self, live: list[_Worker], phase: RemotePhase) -> None:
        """The polls still out when a phase is interrupted: their answers hold rows the workers
        have handed over, so they are awaited (briefly: a stopped worker must not hold Ctrl-C up)."""
        pending = {w.name: self._polls[w.name] for w in live if w.name in self._polls}
        if pending:
            await asyncio.wait(pending.values(), timeout=DRAIN_S)
        for w in live:
            if w.name in pending:
                self._answer(w, phase, time.monotonic())
        self._drop_polls()

    def _drop_polls(self, name: str | None = None) -> None:
        """Forget outstanding polls (one worker's, or all): their answers can no longer be used."""
        for key in list(self._polls) if name is None else [name]:
            fut = self._polls.pop(key, None)
            if fut is not None and fut.done() and not fut.cancelled():
                fut.exception()  # retrieved, so asyncio does not log it as never retrieved
            elif fut is not None:
                fut.cancel()

    def _take(self, w: _Worker, res: dict[str, Any], phase: RemotePhase) -> None:
        end = w.take(res, phase)
        if end is not None:
            self._last_end_ns = max(self._last_end_ns or 0, end)

    def _lose(self, w: _Worker, phase: RemotePhase, why: str) -> None:
        """The worker is gone: its in-flight requests become worker_lost rows; it is killed."""
        with contextlib.suppress(Exception):
            self.ray.kill(w.actor, no_restart=True)
        self._drop_polls(w.name)
        where = f"{w.name} on {w.where.get('hostname') or w.node.hostname} ({w.node.node_id[:12]})"
        w.lose(phase, where, why)

    async def _cancel(self, active: list[_Worker], phase: RemotePhase) -> None:
        await self._drain_polls([w for w in active if w.state == "ready"], phase)
        live = [w for w in active if w.state == "ready"]
        results = await settle([w.actor.cancel.remote() for w in live], 15.0)
        for w, res in zip(live, results, strict=True):
            if isinstance(res, BaseException):
                self._lose(w, phase, one_line(res))
            else:
                self._take(w, res, phase)

    def _worker_record(self, w: _Worker) -> dict[str, Any]:
        return {
            **w.book_record(),
            "node_id": w.where.get("node_id") or w.node.node_id,
            "hostname": w.where.get("hostname") or w.node.hostname,
            "ip": w.where.get("ip") or w.node.ip,
            **(w.clock.record() if w.clock is not None else {}),
        }

    # --- end of run -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """End the workers (their sessions closed, then the actors killed)."""
        live = [w for w in self.workers if w.state == "ready"]
        with contextlib.suppress(Exception):
            await settle([w.actor.close.remote() for w in live], 10.0)
        self._kill_all()

    def _kill_all(self) -> None:
        for w in self.workers:
            if w.actor is not None:
                with contextlib.suppress(Exception):
                    self.ray.kill(w.actor, no_restart=True)

    def record(self) -> dict[str, Any]:
        """The run's view of the backend: the session, the placement, each worker's last state."""
        return {
            "backend": "ray",
            "placement": self.placement,
            "workers_requested": self.workers_wanted,
            "workers": [self._worker_record(w) for w in self.workers],
            "workers_lost": [w.name for w in self.workers if w.state == "lost"],
        }


def _check_reachable(base_url: str, plan: list[NodeInfo]) -> None:
    """A server on this machine's loopback cannot be reached by workers on other machines."""
    from urllib.parse import urlsplit

    remote = off_this_machine(plan)
    host = urlsplit(base_url).hostname or ""
    if remote and is_loopback(host):
        raise UsageError(
            f"target.base_url: {base_url} is a loopback address, which load workers on other machines "
            f"({remote[0].hostname}) cannot reach: give the server's address on the network"
        )


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        from kvbench.load.ray_worker import LoadWorker

        _ACTOR_CLASS = ray.remote(LoadWorker)
    return _ACTOR_CLASS
