"""Noise on a Ray cluster: N noise clients, each an actor on its node running a local generator.

Registered for cluster "ray" (see the registry in `kvbench.noise`): `noise_generator(cfg, ...,
cluster="ray")` returns a RayNoiseBackend, which the runner enters like any other backend.

    start   place the clients (kvbench.cluster.placement: spread or pack), start one NoiseClient
            actor (remote.py) per client pinned to its node, measure its clock offset, start its
            generator (the local tcp / iperf3 / fio backend, run on that node)
    rows    once a second the driver asks every client for its byte count and writes a row per
            client (with its node id and hostname) and a total row, the sum of the client rows, to
            noise.jsonl; a kind that reports only at the end (iperf3) has its rows shipped back at
            the stop and placed on the driver's timeline through the client's clock offset
    stop    every generator stops the local way on its node; then every actor is killed, whatever
            happened (an interrupted run included: no generator outlives the phase on any node)

A client that cannot start, cannot reach its share of the target rate, or dies (its node gone) is
recorded (state, error, bytes until then) and the others go on; only when no client starts does
the phase refuse to run, as a local generator would. The manifest's noise summary gains the
placement, each client's node and achieved rate, and a per-node roll-up (`cluster`).
How a noise section divides over N clients: ray_plan.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from kvbench.cluster import require_ray
from kvbench.cluster.calls import is_lost, one_line, settle
from kvbench.cluster.clock import ClockOffset, measure_offset
from kvbench.cluster.placement import (
    NodeInfo,
    alive_nodes,
    is_loopback,
    node_affinity,
    off_this_machine,
    place,
)
from kvbench.errors import UsageError
from kvbench.noise.backend import NoiseBackend, NoiseContext
from kvbench.noise.handle import REACHED_FRACTION, NoiseHandle, format_rate
from kvbench.noise.process import split_host_port
from kvbench.noise.ray_plan import RayNoiseOptions, client_configs, client_target

SAMPLE_INTERVAL_S = 1.0
SAMPLE_TIMEOUT_S = 0.8  # a client that answers later counts in the next second
STOP_TIMEOUT_S = 20.0  # fio may take seconds to unlink its files
END_ONLY_KINDS = {"iperf3"}  # byte counts known only when the generator stops
_ACTOR_CLASS: Any = None


@dataclass
class _Client:
    name: str
    node: NodeInfo  # where it was placed
    cfg: dict[str, Any]
    target_bytes_per_s: float | None
    actor: Any = None
    where: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    state: str = "placed"  # placed | running | stopped | failed | lost
    error: str | None = None
    sampled: int = 0  # cumulative bytes, as last sampled
    recorded: int = 0  # of those, written in rows so far
    final: dict[str, Any] | None = None
    started_ns: int | None = None  # driver timeline
    ended_ns: int | None = None


@dataclass
class ClusterNoiseHandle(NoiseHandle):
    """A NoiseHandle whose rows name each client's node, and whose summary has the cluster view."""

    where: dict[str, dict[str, str]] = field(default_factory=dict)  # client -> node_id, hostname
    cluster: dict[str, Any] = field(default_factory=dict)

    def _row(self, t_ns: int, client: str, nbytes: int, dt_s: float) -> None:
        if self.writer is None:
            return
        row: dict[str, Any] = {
            "t_ns": int(t_ns),
            "phase": self.phase,
            "client": client,
            "bytes": int(nbytes),
            "bytes_per_s": round(nbytes / dt_s, 1),
        }
        row.update(self.where.get(client, {}))
        self.writer.write(row)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out["gb_per_s"] = round(out["mean_bytes_per_s"] / 1e9, 3)
        out["cluster"] = self.cluster
        return out


class RayNoiseBackend(NoiseBackend):
    """`clients` noise clients on the Ray cluster, each running the noise section's generator."""

    handle: ClusterNoiseHandle

    def __init__(self, cfg: Any, ctx: NoiseContext, options: RayNoiseOptions | None = None) -> None:
        self.ray = require_ray("noise on a Ray cluster")
        self.cfg = cfg
        self.ctx = ctx
        self.options = options or RayNoiseOptions.from_config(cfg)
        if self.options.clients < 1:
            raise UsageError("noise.clients: at least one noise client")
        self.configs = client_configs(cfg, self.options.clients, ctx.default_targets)
        shares = [client_target(cfg.kind, one) for one in self.configs]
        target = sum(s for s in shares if s) or None
        self.handle = ClusterNoiseHandle(
            kind=cfg.kind,
            config=cfg.model_dump(),
            phase=ctx.phase,
            origin_ns=ctx.origin_ns,
            writer=ctx.writer,
            target_bytes_per_s=target,
        )
        self.clients: list[_Client] = []
        self._shares = shares
        self._ticker: asyncio.Task[None] | None = None
        self._last_ns = 0
        self.session: Any = None  # kvbench.cluster.session.RaySession, once started

    # --- start ------------------------------------------------------------------------------------

    async def start(self) -> ClusterNoiseHandle:
        from kvbench.cluster import session

        sess = self.session = session.current()
        try:
            await self._start(sess)
        except BaseException:
            with contextlib.suppress(BaseException):
                await self._stop_clients()
            self._kill_all()
            raise
        return self.handle

    async def _start(self, sess: Any) -> None:
        limits = sess.limits
        nodes = alive_nodes(self.ray)
        plan = place(
            self.options.clients,
            nodes,
            self.options.placement,
            cpus_per_client=limits.cpus_per_noise_client,
            avoid=sess.avoid(noise=True),
        )
        self._check_reachable(plan)
        actor_class = _actor_class(self.ray)
        for i, (node, one, share) in enumerate(zip(plan, self.configs, self._shares, strict=True)):
            c = _Client(name=f"ray-{i}", node=node, cfg=one, target_bytes_per_s=share)
            c.actor = actor_class.options(
                num_cpus=limits.cpus_per_noise_client,
                scheduling_strategy=node_affinity(node.node_id),
                max_restarts=0,
            ).remote(c.name)
            self.clients.append(c)
        timeout = limits.start_timeout_s
        wheres = await settle([c.actor.where.remote() for c in self.clients], timeout)
        for c, where in zip(self.clients, wheres, strict=True):
            if isinstance(where, BaseException):
                self._fail(
                    c, f"did not start on {c.node.hostname} ({c.node.node_id[:12]}): {one_line(where)}"
                )
            else:
                c.where = where
        up = [c for c in self.clients if c.state == "placed"]
        clocks = await asyncio.gather(*(self._clock(c) for c in up), return_exceptions=True)
        for c, clock in zip(up, clocks, strict=True):
            c.clock = clock if isinstance(clock, ClockOffset) else None
        refs = [c.actor.start.remote(self.cfg.kind, c.cfg, self.ctx.phase) for c in up]
        for c, res in zip(up, await settle(refs, timeout), strict=True):
            if isinstance(res, BaseException):
                self._fail(c, one_line(res))
            elif res.get("error"):
                self._fail(c, str(res["error"]))
            else:
                c.state = "running"
                c.started_ns = self._to_driver(c, res.get("started_ns"))
        self._describe()
        running = [c for c in self.clients if c.state == "running"]
        if not running:
            first = next((c.error for c in self.clients if c.error), "no client started")
            raise UsageError(f"noise: no noise client started on the Ray cluster: {first}")
        if len(running) < len(self.clients):  # part of the noise is not the noise asked for
            first = next((c.error for c in self.clients if c.error), "")
            raise UsageError(
                f"noise: {len(running)} of {len(self.clients)} noise clients started on the Ray cluster "
                f"({first}); lower noise.clients or cluster.cpus_per_noise_client"
            )
        h = self.handle
        h.started_ns = self._last_ns = h.now_ns()
        h.active = True
        self._ticker = asyncio.create_task(self._tick())

    def _check_reachable(self, plan: list[NodeInfo]) -> None:
        """A loopback sink is this machine's: a client on another machine cannot reach it."""
        if self.cfg.kind != "tcp":
            return
        remote = off_this_machine(plan)
        if not remote:
            return
        for target in self.configs[0]["targets"]:
            host, _ = split_host_port(target, None, "noise.targets")
            if is_loopback(host):
                raise UsageError(
                    f"noise.targets: {target} is a loopback address, which noise clients on other "
                    f"machines ({remote[0].hostname}) cannot reach: give a sink address the nodes can "
                    "reach (`kvbench noise sink --host 0.0.0.0`, or the mock's fabric on such an address)"
                )

    async def _clock(self, c: _Client) -> ClockOffset:
        from kvbench.cluster.calls import call

        return await measure_offset(lambda: call(c.actor.clock.remote(), 5.0))

    def _to_driver(self, c: _Client, remote_ns: int | None) -> int | None:
        """A remote perf_counter_ns reading on the run's timeline (None without a clock offset)."""
        if remote_ns is None or c.clock is None:
            return None
        return c.clock.to_driver(int(remote_ns)) - self.handle.origin_ns

    def _fail(self, c: _Client, error: str, *, lost: bool = False) -> None:
        c.state = "lost" if lost else "failed"
        c.error = error
        c.ended_ns = self.handle.now_ns()
        where = f"{c.where.get('hostname') or c.node.hostname} ({c.node.node_id[:12]})"
        self.handle.problems.append(f"{c.name} on {where}: {error}")

    # --- rows -------------------------------------------------------------------------------------

    def sample_bytes(self) -> int | None:
        if self.cfg.kind in END_ONLY_KINDS:
            return None
        return sum(c.sampled for c in self.clients)

    async def _tick(self) -> None:
        h = self.handle
        assert h.started_ns is not None
        start = h.started_ns
        k = 1
        # bounded: the generators stop at max_duration_s; the sampler stops with them (+ slack)
        while h.now_ns() - start < (self.cfg.max_duration_s + 10.0) * 1e9:
            delay = (start + k * SAMPLE_INTERVAL_S * 1e9 - h.now_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            k += 1
            running = [c for c in self.clients if c.state == "running"]
            if not running:
                break
            samples = await settle([c.actor.sample.remote() for c in running], SAMPLE_TIMEOUT_S)
            for c, s in zip(running, samples, strict=True):
                if isinstance(s, BaseException):
                    if is_lost(s):
                        self._fail(c, f"lost: {one_line(s)}", lost=True)
                    continue  # late: its bytes count in the next second
                if s.get("bytes") is not None:
                    c.sampled = max(c.sampled, int(s["bytes"]))
            self._record(full=True)

    def _record(self, *, full: bool) -> None:
        """One interval on the driver's clock: each client's bytes since the last row, and the total.

        A lost client has no rows after its last count: the total is the sum of the rows written."""
        if self.cfg.kind in END_ONLY_KINDS:
            return
        h = self.handle
        now = h.now_ns()
        dt = (now - self._last_ns) / 1e9
        per_client = {}
        for c in self.clients:
            if c.state == "running" or c.sampled > c.recorded:
                per_client[c.name] = c.sampled - c.recorded
                c.recorded = c.sampled
        if dt > 0 and per_client:
            h.record(now, dt, per_client, full=full and dt >= 0.5)
            self._last_ns = now

    def _record_end_only(self) -> None:
        """iperf3 reports at the end: each client's intervals, moved onto the driver's timeline."""
        series: list[tuple[_Client, list[dict[str, Any]]]] = [
            (c, list((c.final or {}).get("rows") or [])) for c in self.clients if c.final
        ]
        h = self.handle
        for k in range(max((len(rows) for _, rows in series), default=0)):
            present = [(c, rows[k]) for c, rows in series if k < len(rows)]
            times = [self._to_driver(c, r["t_ns"]) for c, r in present]
            t_ns = max((t for t in times if t is not None), default=h.now_ns())
            dt = max(r["bytes"] / r["bytes_per_s"] if r.get("bytes_per_s") else 1.0 for _, r in present)
            h.record(t_ns, dt, {c.name: int(r["bytes"]) for c, r in present}, full=dt >= 0.5)

    # --- stop -------------------------------------------------------------------------------------

    async def stop(self) -> None:
        h = self.handle
        stop_ns = h.now_ns()
        try:
            if self._ticker is not None:
                self._ticker.cancel()
                with contextlib.suppress(BaseException):
                    await self._ticker
            await self._stop_clients()
            if h.started_ns is not None:
                if self.cfg.kind in END_ONLY_KINDS:
                    self._record_end_only()
                else:
                    self._record(full=False)  # the last partial second, up to the final counts
        finally:
            self._kill_all()
            h.active = False
            if h.started_ns is not None:
                h.stopped_ns = stop_ns
            self._complete()

    async def _stop_clients(self) -> None:
        """Every running generator stops the local way on its node; the final counts come back."""
        running = [c for c in self.clients if c.state == "running"]
        results = await settle([c.actor.stop.remote() for c in running], STOP_TIMEOUT_S)
        for c, res in zip(running, results, strict=True):
            if isinstance(res, BaseException):
                self._fail(
                    c, f"{'lost' if is_lost(res) else 'no clean stop'}: {one_line(res)}", lost=is_lost(res)
                )
                continue
            c.state = "stopped"
            c.final = res
            c.ended_ns = self._to_driver(c, res.get("stopped_ns")) or self.handle.now_ns()
            c.sampled = max(c.sampled, int(res.get("total_bytes") or 0))

    def _kill_all(self) -> None:
        """Kill every actor (its generator's senders see EOF and exit; a local Ray reaps the rest)."""
        for c in self.clients:
            if c.actor is not None:
                with contextlib.suppress(Exception):
                    self.ray.kill(c.actor, no_restart=True)

    # --- what the manifest says -------------------------------------------------------------------

    def _complete(self) -> None:
        h = self.handle
        h.total_bytes = sum(c.sampled for c in self.clients)
        h.clients = [self._client_record(c) for c in self.clients]
        # the mean over the span the generators ran (first start to last stop, on the driver's
        # timeline): every byte counted was sent inside it; the phase window is a little shorter
        ran = [c for c in self.clients if c.started_ns is not None and c.ended_ns is not None]
        if ran:
            span = max(c.ended_ns or 0 for c in ran) - min(c.started_ns or 0 for c in ran)
            h.duration_s = span / 1e9 if span > 0 else None
        self._describe()

    def _client_record(self, c: _Client) -> dict[str, Any]:
        local = (c.final or {}).get("summary") or {}
        duration = local.get("duration_s")
        if not duration and c.started_ns is not None and c.ended_ns is not None:
            duration = (c.ended_ns - c.started_ns) / 1e9
        mean = c.sampled / duration if duration else 0.0
        reached = None
        if c.target_bytes_per_s and c.state in ("stopped", "lost"):
            reached = mean >= REACHED_FRACTION * c.target_bytes_per_s
            if not reached and c.state == "stopped":
                h = self.handle
                h.problems.append(
                    f"{c.name} on {c.where.get('hostname') or c.node.hostname}: reached "
                    f"{format_rate(mean)} of its {format_rate(c.target_bytes_per_s)} share"
                )
        for p in local.get("warning", "").split("; ") if local.get("warning") else []:
            if "never reached its target" not in p:  # said once, above, with the client's name
                self.handle.problems.append(f"{c.name}: {p}")
        return {
            "client": c.name,
            "state": c.state,
            "node_id": c.where.get("node_id") or c.node.node_id,
            "hostname": c.where.get("hostname") or c.node.hostname,
            "ip": c.where.get("ip") or c.node.ip,
            "pid": c.where.get("pid"),
            "config": {
                k: v for k, v in c.cfg.items() if k in ("targets", "servers", "path", "rate_bytes_per_s")
            },
            "bytes": c.sampled,
            "duration_s": round(duration or 0.0, 3),
            "mean_bytes_per_s": round(mean, 1),
            "gb_per_s": round(mean / 1e9, 3),
            "target_bytes_per_s": c.target_bytes_per_s,
            "reached_target": reached,
            "error": c.error,
            "generators": local.get("clients") or [],
            **(c.clock.record() if c.clock is not None else {}),
        }

    def _describe(self) -> None:
        """The cluster view: placement, clients by state, and the bytes and rate of every node."""
        h = self.handle
        h.where = {
            c.name: {
                "node_id": c.where.get("node_id") or c.node.node_id,
                "hostname": c.where.get("hostname") or c.node.hostname,
            }
            for c in self.clients
        }
        nodes: dict[str, dict[str, Any]] = {}
        for c in self.clients:
            n = nodes.setdefault(
                c.node.node_id,
                {
                    "node_id": c.node.node_id,
                    "hostname": c.node.hostname,
                    "ip": c.node.ip,
                    "clients": [],
                    "bytes": 0,
                },
            )
            n["clients"].append(c.name)
            n["bytes"] += c.sampled
        rates = {r["client"]: r["mean_bytes_per_s"] for r in h.clients}  # each over its own run time
        for n in nodes.values():
            rate = sum(rates.get(name, 0.0) for name in n["clients"])
            n["mean_bytes_per_s"] = round(rate, 1)
            n["gb_per_s"] = round(rate / 1e9, 3)
        h.cluster = {
            "backend": "ray",
            "session": self.session.record() if self.session is not None else None,
            "placement": self.options.placement,
            "clients_requested": self.options.clients,
            "clients_running": sum(c.state in ("running", "stopped") for c in self.clients),
            "clients_failed": [c.name for c in self.clients if c.state == "failed"],
            "clients_lost": [c.name for c in self.clients if c.state == "lost"],
            "nodes": list(nodes.values()),
        }


def _actor_class(ray: Any) -> Any:
    """The NoiseClient actor class, made once per process (ray.remote at import would need Ray)."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        from kvbench.noise.remote import NoiseClient

        _ACTOR_CLASS = ray.remote(NoiseClient)
    return _ACTOR_CLASS
