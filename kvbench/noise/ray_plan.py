"""How a noise section divides over the N clients of a Ray cluster (pure: no Ray, no network).

The noise section says what ONE generator does (tcp senders, iperf3 streams, fio jobs); with
`clients: N` every client runs it on its node, with these shares:
    tcp     every client streams to every sink (its senders starting at a different one), at
            rate / N when a total rate is set: the section's rate stays the total
    iperf3  the servers are dealt out (an iperf3 server serves one client at a time)
    fio     every client contends on the same path: each node's local disk, or a shared file system
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.cluster.placement import Placement
from kvbench.errors import UsageError
from kvbench.noise.iperf3 import parse_bitrate


@dataclass(frozen=True)
class RayNoiseOptions:
    """How many clients and where: the noise section's `clients`/`placement` when it has them."""

    clients: int = 1
    placement: Placement = "spread"

    @classmethod
    def from_config(cls, cfg: Any) -> RayNoiseOptions:
        return cls(
            clients=int(getattr(cfg, "clients", 1) or 1), placement=getattr(cfg, "placement", "spread")
        )


def client_configs(cfg: Any, clients: int, default_targets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The noise section (as a dict) each of `clients` clients runs; see the module docstring."""
    base = cfg.model_dump()
    out = []
    for i in range(clients):
        one = dict(base)
        if cfg.kind == "tcp":
            targets = list(cfg.targets) or list(default_targets)
            if not targets:
                raise UsageError(
                    "noise.targets: the tcp noise generator needs an explicit target (host:port)"
                )
            one["targets"] = targets[i % len(targets) :] + targets[: i % len(targets)]
            if cfg.rate_bytes_per_s:
                one["rate_bytes_per_s"] = cfg.rate_bytes_per_s / clients
        elif cfg.kind == "iperf3":
            if len(cfg.servers) < clients:
                raise UsageError(
                    f"noise.servers: {clients} iperf3 clients need at least {clients} servers "
                    "(an iperf3 server serves one client at a time)"
                )
            one["servers"] = list(cfg.servers[i::clients])
        out.append(one)
    return out


def client_target(kind: str, one: dict[str, Any]) -> float | None:
    """A client's share of the target rate, bytes/s (None: the kind has no target)."""
    if kind == "tcp":
        return one.get("rate_bytes_per_s") or None
    if kind == "iperf3" and one.get("bitrate"):
        return parse_bitrate(one["bitrate"]) / 8 * one["parallel"] * len(one["servers"]) or None
    return None
