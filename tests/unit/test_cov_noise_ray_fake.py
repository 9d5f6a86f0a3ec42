"""The Ray noise backend's driver side against a stand-in Ray: the actors are real NoiseClients in
this process (their tcp senders real child processes, the sink in-process), so placement, the
rows with each client's node, the totals against the sink, the refusals (nobody started, part of
the clients started, a loopback sink for other machines) and the kill of every actor are checked
without a Ray cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any

import pytest

from kvbench.cluster import session
from kvbench.cluster.session import ClusterLimits, RaySession
from kvbench.errors import UsageError
from kvbench.noise import ray_backend
from kvbench.noise.backend import NoiseContext
from kvbench.noise.ray_backend import RayNoiseBackend
from kvbench.noise.ray_plan import RayNoiseOptions
from kvbench.noise.remote import NoiseClient
from kvbench.noise.sink import tcp_sink
from kvbench.scenario.noise import Iperf3Noise, TcpNoise


class _Ref:
    """An ObjectRef: `future()` is a concurrent future of the call's result."""

    def __init__(self, fut: concurrent.futures.Future[Any]) -> None:
        self._fut = fut

    def future(self) -> concurrent.futures.Future[Any]:
        return self._fut


class _Method:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> _Ref:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            out = self.fn(*args)
        except Exception as exc:  # as Ray does: the call's failure comes back through its ref
            fut.set_exception(exc)
            return _Ref(fut)
        if asyncio.iscoroutine(out):
            return _Ref(asyncio.run_coroutine_threadsafe(out, asyncio.get_running_loop()))
        fut.set_result(out)
        return _Ref(fut)


class _Lost(Exception):
    """Stands in for Ray's RayActorError: the actor or its node is gone."""


def _gone() -> None:
    raise _Lost("The actor died unexpectedly before finishing this task.")


class _Actor:
    """An actor handle on a node: calls go to a real NoiseClient; where() answers for the node."""

    def __init__(self, client: NoiseClient, node: dict[str, Any], lost: set[str]) -> None:
        self.client = client
        self.node = node
        self.lost = lost

    def __getattr__(self, name: str) -> _Method:
        if name == "sample" and self.client.name in self.lost:
            return _Method(_gone)
        if name == "where":
            node = self.node
            where = {"node_id": node["NodeID"], "hostname": node["NodeManagerHostname"],
                     "ip": node["NodeManagerAddress"], "pid": 4000}  # fmt: skip
            return _Method(lambda: where)
        return _Method(getattr(self.client, name))


class _FakeRay:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._nodes = nodes
        self.placed: list[tuple[str, str, float]] = []  # (client, node, cpus)
        self.killed: list[str] = []
        self.lost: set[str] = set()  # clients whose node goes away at their first sample
        self.actors: list[_Actor] = []

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes

    def remote(self, cls: type) -> Any:
        fake = self

        class _Options:
            def __init__(self, **kw: Any) -> None:
                self.kw = kw

            def remote(self, name: str) -> _Actor:
                node = next(n for n in fake._nodes if n["NodeID"] == self.kw["scheduling_strategy"])
                fake.placed.append((name, node["NodeID"], self.kw["num_cpus"]))
                actor = _Actor(cls(name), node, fake.lost)
                fake.actors.append(actor)
                return actor

        class _Class:
            @staticmethod
            def options(**kw: Any) -> _Options:
                return _Options(**kw)

        return _Class

    def kill(self, actor: _Actor, no_restart: bool = True) -> None:
        self.killed.append(actor.client.name)


def _node(node_id: str, host: str, ip: str = "127.0.0.1", alive: bool = True) -> dict[str, Any]:
    return {"NodeID": node_id, "NodeManagerHostname": host, "NodeManagerAddress": ip, "Alive": alive,
            "Resources": {"CPU": 4.0}}  # fmt: skip


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> _FakeRay:
    ray = _FakeRay(
        [_node("node-b" * 3, "host-b"), _node("node-a" * 3, "host-a"), _node("dead", "x", alive=False)]
    )
    sess = RaySession(
        address="auto", mode="existing", ray_version="fake", driver_node_id=None, driver_ip=None,
        shipped_code=False, limits=ClusterLimits(cpus_per_noise_client=0.5, start_timeout_s=30.0),
    )  # fmt: skip
    monkeypatch.setattr(ray_backend, "require_ray", lambda _why: ray)
    monkeypatch.setattr(ray_backend, "node_affinity", lambda node_id: node_id)
    monkeypatch.setattr(ray_backend, "_ACTOR_CLASS", None)
    monkeypatch.setattr(session, "current", lambda: sess)
    monkeypatch.setattr(ray_backend, "is_lost", lambda exc: isinstance(exc, _Lost))
    return ray


def _backend(cfg: Any, rows: _Rows | None, clients: int) -> RayNoiseBackend:
    ctx = NoiseContext(phase="noisy-1", writer=rows, origin_ns=0)
    return RayNoiseBackend(cfg, ctx, RayNoiseOptions(clients=clients, placement="spread"))


async def test_clients_spread_over_the_alive_nodes_and_their_bytes_reach_the_sink(fake_ray: _FakeRay) -> None:
    rows = _Rows()
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=1, rate_bytes_per_s=2e6, max_duration_s=60)
        backend = _backend(cfg, rows, clients=2)
        assert backend.handle.target_bytes_per_s == 2e6  # the shares add up to the section's rate
        async with backend as handle:
            await asyncio.sleep(0.3)
        for _ in range(500):  # bytes counted as sent may still be on their way
            if sink.bytes_received >= handle.total_bytes:
                break
            await asyncio.sleep(0.02)
        received = sink.bytes_received
    assert sorted(n for _c, n, _cpu in fake_ray.placed) == ["node-a" * 3, "node-b" * 3]
    assert {cpu for *_x, cpu in fake_ray.placed} == {0.5}
    assert sorted(fake_ray.killed) == ["ray-0", "ray-1"]  # every actor killed at the end
    assert handle.total_bytes == received > 0
    summary = handle.summary()
    clients = {c["client"]: c for c in summary["clients"]}
    assert {c["state"] for c in clients.values()} == {"stopped"}
    assert sum(c["bytes"] for c in clients.values()) == handle.total_bytes
    assert all(
        c["target_bytes_per_s"] == 1e6 and c["config"]["targets"] == [sink.address] for c in clients.values()
    )
    # the "nodes" share this clock: each measured offset lies within its own uncertainty
    assert all(abs(c["clock_offset_ns"]) <= c["clock_uncertainty_ns"] + 1 for c in clients.values())
    cluster = summary["cluster"]
    assert (
        cluster["clients_running"] == 2
        and cluster["clients_failed"] == []
        and cluster["placement"] == "spread"
    )
    assert sorted(n["hostname"] for n in cluster["nodes"]) == ["host-a", "host-b"]
    assert sum(n["bytes"] for n in cluster["nodes"]) == handle.total_bytes
    assert summary["gb_per_s"] == round(summary["mean_bytes_per_s"] / 1e9, 3)
    for r in rows.rows:  # a client's rows name its node; the total row names none
        if r["client"] == "total":
            assert "node_id" not in r
        else:
            assert r["hostname"] == clients[r["client"]]["hostname"]
    assert sum(r["bytes"] for r in rows.rows if r["client"] == "total") == handle.total_bytes


async def test_no_client_started_refuses_with_the_first_reason(
    fake_ray: _FakeRay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no iperf3 on any "node"
    backend = _backend(Iperf3Noise(servers=["10.0.0.1", "10.0.0.2"]), None, clients=2)
    assert backend.sample_bytes() is None  # iperf3 reports only at the end
    with pytest.raises(UsageError) as exc:
        await backend.start()
    assert exc.value.message.startswith(
        "noise: no noise client started on the Ray cluster: noise.kind=iperf3"
    )
    assert sorted(fake_ray.killed) == ["ray-0", "ray-1"]
    assert backend.handle.cluster["clients_failed"] == ["ray-0", "ray-1"]
    assert len(backend.handle.problems) == 2 and "host-" in backend.handle.problems[0]


async def test_part_of_the_clients_started_is_refused_and_the_started_one_stopped(fake_ray: _FakeRay) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # closed: nothing listens there
    async with tcp_sink() as sink:
        # one sender each, the targets dealt in turn: ray-0 streams to the sink, ray-1 to nothing
        cfg = TcpNoise(targets=[sink.address, dead], senders=1, max_duration_s=60)
        backend = _backend(cfg, None, clients=2)
        with pytest.raises(UsageError, match=r"1 of 2 noise clients started.*lower noise.clients"):
            await backend.start()
    states = {c.name: c.state for c in backend.clients}
    assert states == {"ray-0": "stopped", "ray-1": "failed"}
    assert sorted(fake_ray.killed) == ["ray-0", "ray-1"]


def test_a_loopback_sink_is_refused_for_clients_on_other_machines(
    fake_ray: _FakeRay, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ray._nodes[:] = [_node("far" * 4, "far-host", ip="192.0.2.10")]  # TEST-NET-1: never this machine
    backend = _backend(TcpNoise(targets=["127.0.0.1:9000"]), None, clients=1)
    with pytest.raises(UsageError) as exc:
        asyncio.run(backend.start())
    assert exc.value.message.startswith("noise.targets: 127.0.0.1:9000 is a loopback address")
    assert "(far-host)" in exc.value.message
    assert fake_ray.placed == []  # refused before any actor was made


def test_zero_clients_is_refused(fake_ray: _FakeRay) -> None:
    with pytest.raises(UsageError, match=r"noise\.clients: at least one"):
        _backend(TcpNoise(targets=["h:1"]), None, clients=0)


async def test_a_client_lost_mid_phase_is_recorded_and_the_others_go_on(fake_ray: _FakeRay) -> None:
    fake_ray.lost.add("ray-1")
    rows = _Rows()
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=1, rate_bytes_per_s=2e6, max_duration_s=60)
        backend = _backend(cfg, rows, clients=2)
        try:
            async with backend as handle:
                for _ in range(600):  # the first sample comes a second in: wait for it, bounded
                    if backend.clients[1].state == "lost":
                        break
                    await asyncio.sleep(0.05)
        finally:
            for actor in fake_ray.actors:  # a real kill ends the lost actor's senders with it
                if actor.client.backend is not None:
                    await actor.client.stop()
    summary = handle.summary()
    clients = {c["client"]: c for c in summary["clients"]}
    assert clients["ray-1"]["state"] == "lost" and clients["ray-1"]["error"].startswith("lost: _Lost: ")
    assert clients["ray-0"]["state"] == "stopped" and clients["ray-0"]["bytes"] > 0
    assert summary["cluster"]["clients_lost"] == ["ray-1"] and summary["cluster"]["clients_running"] == 1
    assert any(p.startswith("ray-1 on host-") and "lost" in p for p in handle.problems)
    assert handle.total_bytes == clients["ray-0"]["bytes"] + clients["ray-1"]["bytes"]
    assert {r["client"] for r in rows.rows} >= {"ray-0", "total"}
