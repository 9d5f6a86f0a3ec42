"""kvbench.cluster's pure parts: placement (spread, pack, avoid, capacity), the NTP-style clock
offset, and actor calls bounded in time, each worked out by hand; no Ray needed."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import Counter
from types import SimpleNamespace

import pytest

from kvbench.cluster.calls import call, one_line, settle
from kvbench.cluster.clock import ClockOffset, estimate_offset, measure_offset
from kvbench.cluster.placement import NodeInfo, alive_nodes, check_room, is_loopback, place


def _nodes(*cpus: float) -> list[NodeInfo]:
    return [NodeInfo(f"n{i}", f"10.0.0.{i + 1}", f"host{i}", c) for i, c in enumerate(cpus)]


def test_alive_nodes_drops_dead_ones_and_sorts_by_id() -> None:
    ray = SimpleNamespace(
        nodes=lambda: [
            {"NodeID": "b", "Alive": True, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 4}},
            {"NodeID": "c", "Alive": False, "NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 8}},
            {"NodeID": "a", "Alive": True, "NodeManagerHostname": "h-a"},  # no resources: 0 CPUs
        ]
    )
    nodes = alive_nodes(ray)
    assert [n.node_id for n in nodes] == ["a", "b"]
    assert nodes[0].cpus == 0.0 and nodes[0].ip == "" and nodes[0].hostname == "h-a"
    assert nodes[1].record() == {"node_id": "b", "ip": "10.0.0.2", "hostname": "", "cpus": 4.0}


def test_spread_is_round_robin_and_balanced() -> None:
    nodes = _nodes(2, 2, 2)
    for count in range(0, 10):
        plan = place(count, nodes, "spread", cpus_per_client=1)
        assert len(plan) == count
        per = Counter(n.node_id for n in plan)
        # round-robin: no node holds two more clients than another
        assert not per or max(per.values()) - min(per.get(n.node_id, 0) for n in nodes) <= 1


def test_spread_puts_avoided_nodes_last() -> None:
    nodes = _nodes(4, 4, 4)
    plan = place(2, nodes, "spread", cpus_per_client=1, avoid={"n0"})
    assert [n.node_id for n in plan] == ["n1", "n2"]
    # only when every other node has a client does the avoided one get one
    plan = place(3, nodes, "spread", cpus_per_client=1, avoid={"n0"})
    assert [n.node_id for n in plan] == ["n1", "n2", "n0"]


def test_pack_fills_a_node_up_to_its_cpus_before_the_next() -> None:
    nodes = _nodes(3, 2)
    plan = place(4, nodes, "pack", cpus_per_client=1)
    assert [n.node_id for n in plan] == ["n0", "n0", "n0", "n1"]
    # two CPUs per client: 3 CPUs hold one, 2 CPUs hold one; the rest round-robin past capacity
    plan = place(4, nodes, "pack", cpus_per_client=2)
    assert [n.node_id for n in plan] == ["n0", "n1", "n0", "n1"]


def test_pack_with_no_cpu_per_client_puts_all_on_the_first_node() -> None:
    plan = place(5, _nodes(1, 1), "pack", cpus_per_client=0)
    assert {n.node_id for n in plan} == {"n0"} and len(plan) == 5


def test_place_needs_a_node_only_when_there_is_a_client() -> None:
    assert place(0, [], "spread", cpus_per_client=1) == []
    with pytest.raises(ValueError, match="no alive node"):
        place(1, [], "pack", cpus_per_client=1)


def test_check_room_fits_and_refuses_with_the_numbers() -> None:
    nodes = _nodes(2, 2)
    common = {"cpus_per_load_worker": 1.0, "noise_placement": "spread", "driver_node_id": None}
    assert check_room(nodes, load_workers=0, noise_clients=0, cpus_per_noise_client=1, **common) is None
    assert check_room([], load_workers=1, noise_clients=0, cpus_per_noise_client=1, **common) == (
        "cluster: the Ray cluster has no alive node"
    )
    # 2 load workers (one per node) + 2 noise clients of 1 CPU: exactly 2 CPUs per node
    assert check_room(nodes, load_workers=2, noise_clients=2, cpus_per_noise_client=1, **common) is None
    # a third noise client needs a third CPU on some node
    why = check_room(nodes, load_workers=2, noise_clients=3, cpus_per_noise_client=1, **common)
    assert why is not None and why.startswith("cluster: cannot place 3 noise clients")
    assert "would need 3 CPUs and has 2" in why and "(4 CPUs on 2 alive nodes)" in why


def test_is_loopback() -> None:
    assert is_loopback("localhost") and is_loopback("127.0.0.1") and is_loopback("::1")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.org")


def test_estimate_offset_takes_the_shortest_round_trip_midpoint() -> None:
    # remote clock runs 1000 ns behind the driver; the 2nd round trip is the shortest (20 ns)
    samples = [(0, 0 - 1000 + 50, 100), (200, 210 - 1000, 220), (300, 300 - 1000 + 40, 380)]
    off = estimate_offset(samples)
    assert off.rtt_ns == 20 and off.uncertainty_ns == 10 and off.rounds == 3
    assert off.offset_ns == 1000
    assert off.to_driver(5) == 1005
    assert off.record() == {
        "clock_offset_ns": 1000,
        "clock_rtt_ns": 20,
        "clock_uncertainty_ns": 10,
        "clock_rounds": 3,
    }
    with pytest.raises(ValueError, match="no round trip"):
        estimate_offset([])


async def test_measure_offset_of_the_same_clock_is_within_its_uncertainty() -> None:
    import time

    async def read_remote() -> int:
        return time.perf_counter_ns()

    off = await measure_offset(read_remote, rounds=4)
    assert isinstance(off, ClockOffset) and off.rounds == 4
    # the remote is this clock: the true offset 0 lies within +- half the round trip
    assert abs(off.offset_ns) <= off.uncertainty_ns + 1


class _Ref:
    def __init__(self, value: object = None, exc: BaseException | None = None, never: bool = False) -> None:
        self._f: concurrent.futures.Future[object] = concurrent.futures.Future()
        if exc is not None:
            self._f.set_exception(exc)
        elif not never:
            self._f.set_result(value)

    def future(self) -> concurrent.futures.Future[object]:
        return self._f


async def test_call_and_settle_bound_every_call() -> None:
    assert await call(_Ref(7), 1.0) == 7
    with pytest.raises(asyncio.TimeoutError):
        await call(_Ref(never=True), 0.01)
    out = await settle([_Ref(1), _Ref(exc=RuntimeError("boom")), _Ref(never=True)], 0.05)
    assert out[0] == 1
    assert isinstance(out[1], RuntimeError) and isinstance(out[2], asyncio.TimeoutError)


def test_one_line_prefers_the_remote_cause_and_stays_short() -> None:
    assert one_line(TimeoutError()) == "no answer in time"
    assert one_line(ValueError()) == "ValueError"
    assert one_line(ValueError("\n\n  first line\nsecond")) == "ValueError: first line"
    # a message that already names its type is not prefixed twice
    assert one_line(RuntimeError("RuntimeError: lost")) == "RuntimeError: lost"
    wrapper = RuntimeError("ray wrapper text")
    wrapper.cause = OSError("disk gone")  # type: ignore[attr-defined]
    assert one_line(wrapper) == "OSError: disk gone"
    long = one_line(RuntimeError("x" * 1000))
    assert len(long) == 300 and long.endswith("...")
