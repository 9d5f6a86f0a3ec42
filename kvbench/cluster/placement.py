"""Which node each remote client runs on: the alive nodes, and a pure, recorded placement.

    spread   one client per node while nodes last, then round again (the published set-up: four
             noise machines); the nodes to avoid (the driver's; for noise also the load workers')
             come last, so that the noise does not share the NIC of the measured load when the
             cluster has room elsewhere
    pack     fill a node up to its CPUs (per-client CPUs from the cluster section) before the next

The placement is computed here, from `ray.nodes()`, and pinned with a hard node affinity, rather
than left to a Ray placement group: the manifest can then say where every client was meant to run
and where it did, and a test can check it without a network.
"""

from __future__ import annotations

import ipaddress
import math
import socket
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Placement = Literal["spread", "pack"]


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node, as placement needs it."""

    node_id: str
    ip: str
    hostname: str
    cpus: float

    def record(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "ip": self.ip, "hostname": self.hostname, "cpus": self.cpus}


def alive_nodes(ray: Any) -> list[NodeInfo]:
    """The cluster's alive nodes, in a stable order (by node id)."""
    nodes = [
        NodeInfo(
            node_id=str(n["NodeID"]),
            ip=str(n.get("NodeManagerAddress", "")),
            hostname=str(n.get("NodeManagerHostname", "")),
            cpus=float((n.get("Resources") or {}).get("CPU", 0.0)),
        )
        for n in ray.nodes()
        if n.get("Alive")
    ]
    return sorted(nodes, key=lambda n: n.node_id)


def place(
    count: int,
    nodes: Sequence[NodeInfo],
    strategy: Placement,
    *,
    cpus_per_client: float,
    avoid: Collection[str] = (),
) -> list[NodeInfo]:
    """The node of each of `count` clients. Nodes whose id is in `avoid` come last.

    spread: round-robin over the nodes. pack: as many as a node's CPUs hold (all on the first node
    when clients ask for no CPU), then the next; beyond the cluster's capacity, round-robin again
    (Ray then queues them, and the start-up deadline records the ones that never ran).
    """
    if count <= 0:
        return []
    if not nodes:
        raise ValueError("no alive node to place on")
    order = sorted(nodes, key=lambda n: (n.node_id in avoid, n.node_id))
    if strategy == "spread":
        return [order[i % len(order)] for i in range(count)]
    out: list[NodeInfo] = []
    for node in order:
        room = count if cpus_per_client <= 0 else math.floor(node.cpus / cpus_per_client + 1e-9)
        out.extend([node] * min(room, count - len(out)))
        if len(out) == count:
            return out
    return out + [order[i % len(order)] for i in range(count - len(out))]


def node_affinity(node_id: str) -> Any:
    """The scheduling strategy that pins an actor to `node_id` (hard: it runs there or not at all)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def is_loopback(host: str) -> bool:
    """A host only this machine reaches: a sink or server there is out of other nodes' reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def on_this_machine(ip: str) -> bool:
    """Whether `ip` is one of this machine's addresses (the kernel picks it as its own source
    address to reach it; a UDP connect sends nothing). Works for a Ray client off the cluster too."""
    try:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))
            return bool(s.getsockname()[0] == ip)
    except OSError:
        return False


def off_this_machine(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes that cannot reach this machine's loopback (127.0.0.1 there is another host)."""
    return [n for n in nodes if not on_this_machine(n.ip)]


def check_room(
    nodes: Sequence[NodeInfo],
    *,
    load_workers: int,
    cpus_per_load_worker: float,
    noise_clients: int,
    noise_placement: Placement,
    cpus_per_noise_client: float,
    driver_node_id: str | None,
) -> str | None:
    """Why the cluster cannot run the load workers and noise clients side by side (one line with
    the numbers), or None when it can. The placement is the one the backends will make (load first,
    noise avoiding its nodes), so a node asked for more CPUs than it has is found before the first
    phase, not as clients that never start and a noisy phase with part of its noise."""
    if load_workers + noise_clients == 0:
        return None
    if not nodes:
        return "cluster: the Ray cluster has no alive node"
    avoid = {driver_node_id} if driver_node_id else set()
    load = place(load_workers, nodes, "spread", cpus_per_client=cpus_per_load_worker, avoid=avoid)
    avoid |= {n.node_id for n in load}
    noise = place(noise_clients, nodes, noise_placement, cpus_per_client=cpus_per_noise_client, avoid=avoid)
    demand: dict[str, float] = {}
    for plan, cpus in ((load, cpus_per_load_worker), (noise, cpus_per_noise_client)):
        for n in plan:
            demand[n.node_id] = demand.get(n.node_id, 0.0) + cpus
    short = [n for n in nodes if demand.get(n.node_id, 0.0) > n.cpus + 1e-9]
    if not short:
        return None
    worst = max(short, key=lambda n: demand[n.node_id] - n.cpus)
    total = sum(n.cpus for n in nodes)
    return (
        f"cluster: cannot place {noise_clients} noise clients ({cpus_per_noise_client:g} CPU each) and "
        f"{load_workers} load workers ({cpus_per_load_worker:g} CPU each): node {worst.hostname or worst.ip} "
        f"would need {demand[worst.node_id]:g} CPUs and has {worst.cpus:g} ({total:g} CPUs on {len(nodes)} "
        f"alive node{'s' if len(nodes) != 1 else ''}); lower noise.clients or load.workers, or "
        "cluster.cpus_per_noise_client / cpus_per_load_worker"
    )
