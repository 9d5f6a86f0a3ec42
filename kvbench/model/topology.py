"""The links cache reads and competing traffic share, and how they share them: ONE rule.

A topology names its links (capacities in bytes/s), the path a KV-cache read takes from the storage
to the inference client, and the path a noise flow takes. Flows share links **max-min fair per
flow** (progressive filling: every unfinished flow's rate rises together until it reaches its own
demand or one of its links is full; TCP-like congestion control converges near it). So a flow is
never given more than it asks for, a link never carries more than its capacity, and noise can slow
a cache read only where the two share a full link and the read asked for more than its fair share.

`PUBLISHED_G4` is the published set-up (IBM Redbooks MD260021): the mock's ibm-g4 profile runs on
it and the audit's bandwidth bound reads it, so the twin and the audit give one answer. At the
published 200 GB/s from 4 clients nothing the cache reads cross is full, so bandwidth alone predicts
no drop; `OTHER_MECHANISMS` lists what else could cost the published 15.5%, each a `Contention`
knob (default off) the mock can turn on to show its effect.

Pure: no I/O, no clock. Imports nothing from kvbench.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

_FULL = 1e-9  # a link with less than this share of its capacity left is full


@dataclass(frozen=True)
class Link:
    name: str
    capacity_bytes_per_s: float
    description: str


@dataclass(frozen=True)
class Flow:
    """One flow: the links it crosses and the rate it asks for (None: as much as it can get)."""

    path: tuple[str, ...]
    demand: float | None = None


@dataclass(frozen=True)
class Contention:
    """Costs of competing traffic beyond bandwidth sharing, each scaled by the noise's load u
    (noise achieved / the capacity of the link it shares with the cache reads, 0..1); 0 = off."""

    loaded_latency_s: float = 0.0  # latency under load: added to every cache read's access at u = 1
    storage_cpu_slowdown: float = 0.0  # storage CPU: fraction of one read's own rate lost at u = 1
    incast_loss: float = 0.0  # incast at the switch: fraction of the client link's goodput lost at u = 1

    @property
    def active(self) -> bool:
        return bool(self.loaded_latency_s or self.storage_cpu_slowdown or self.incast_loss)


# What else could cost a throughput drop that bandwidth alone does not predict: (name, the mock
# profile field that models it, what it stands for). The report and the audit list these.
OTHER_MECHANISMS: tuple[tuple[str, str, str], ...] = (
    (
        "latency under load",
        "fabric.contention.loaded_latency_s",
        "queueing behind the noise in switch buffers and storage queues adds time to every block read",
    ),
    (
        "storage CPU",
        "fabric.contention.storage_cpu_slowdown",
        "the storage servers' CPUs serving the noise serve each cache read more slowly",
    ),
    (
        "incast at the switch",
        "fabric.contention.incast_loss",
        "many storage servers answering one client at once overflow the switch port's buffer, "
        "more so beside the noise: losses and retransmits cut the client link's goodput",
    ),
)


@dataclass(frozen=True)
class Share:
    """How the links were shared at one moment (bytes/s)."""

    cache_each: float  # each cache read's rate
    cache_total: float
    noise_each: tuple[float, ...]  # each noise flow's achieved rate
    noise_offered: float
    noise_achieved: float
    noise_load: float  # u: noise achieved / capacity of the link it shares with the cache reads
    link_load: dict[str, float] = field(default_factory=dict)  # bytes/s on each link, all flows


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    links: tuple[Link, ...]
    cache_path: tuple[str, ...]  # links a KV-cache read crosses, storage to inference client
    noise_path: tuple[str, ...]  # links a noise flow crosses
    noise_clients: int = 1  # competing clients in the published set-up (one flow each)
    noise_offered_bytes_per_s: float | None = None  # the competing traffic the set-up was tested with
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [ln.name for ln in self.links]
        for ln in self.links:
            if not ln.capacity_bytes_per_s > 0:
                raise ValueError(f"topology {self.name}: link {ln.name} needs a positive capacity")
        for what, path in (("cache_path", self.cache_path), ("noise_path", self.noise_path)):
            unknown = [n for n in path if n not in names]
            if unknown or not path:
                raise ValueError(f"topology {self.name}: {what} names unknown links {unknown or '(none)'}")

    def capacity(self, link: str) -> float:
        return next(ln.capacity_bytes_per_s for ln in self.links if ln.name == link)

    def capacities(self) -> dict[str, float]:
        return {ln.name: ln.capacity_bytes_per_s for ln in self.links}

    @property
    def shared_link(self) -> str | None:
        """The smallest link both paths cross: where the noise competes with the cache reads."""
        shared = [n for n in self.cache_path if n in self.noise_path]
        return min(shared, key=self.capacity) if shared else None

    @property
    def client_link(self) -> str:
        """The smallest link only the cache reads cross (incast hits its goodput)."""
        own = [n for n in self.cache_path if n not in self.noise_path] or list(self.cache_path)
        return min(own, key=self.capacity)

    @property
    def cache_bandwidth(self) -> float:
        """What cache reads alone can move in all: the smallest link on their path."""
        return min(self.capacity(n) for n in self.cache_path)

    def noise_link_capacity(self) -> float | None:
        link = self.shared_link
        return self.capacity(link) if link is not None else None

    def share(
        self,
        cache_reads: int,
        cache_read_cap: float | None,
        noise_offered: Sequence[float],
        contention: Contention | None = None,
    ) -> Share:
        """Max-min fair rates of `cache_reads` identical reads (each capped at `cache_read_cap`, the
        rate one read reaches alone) beside noise flows offering `noise_offered` bytes/s each."""
        c = contention or Contention()
        caps = self.capacities()
        first = self._allocate(caps, cache_reads, cache_read_cap, noise_offered)
        u = self._noise_load(first)
        if not c.active or u <= 0:
            return first
        if c.incast_loss:
            link = self.client_link
            caps[link] *= max(0.0, 1.0 - c.incast_loss * u)
        cap = cache_read_cap
        if c.storage_cpu_slowdown and cap is not None:
            cap *= max(1e-6, 1.0 - c.storage_cpu_slowdown * u)
        return replace(self._allocate(caps, cache_reads, cap, noise_offered), noise_load=u)

    def _noise_load(self, s: Share) -> float:
        cap = self.noise_link_capacity()
        return min(1.0, s.noise_achieved / cap) if cap else 0.0

    def _allocate(
        self, caps: Mapping[str, float], k: int, read_cap: float | None, noise: Sequence[float]
    ) -> Share:
        flows = [Flow(self.cache_path, read_cap)] * k + [Flow(self.noise_path, r) for r in noise]
        rates = max_min_fair(caps, flows)
        load = dict.fromkeys(caps, 0.0)
        for f, r in zip(flows, rates, strict=True):
            for n in f.path:
                load[n] += r
        noise_each = tuple(rates[k:])
        if k == 0:  # no read in flight: the rate one would get if it started now
            each = max_min_fair(caps, [Flow(self.cache_path, read_cap), *flows])[0]
        s = Share(
            cache_each=rates[0] if k else each,
            cache_total=sum(rates[:k]),
            noise_each=noise_each,
            noise_offered=float(sum(noise)),
            noise_achieved=float(sum(noise_each)),
            noise_load=0.0,
            link_load=load,
        )
        return replace(s, noise_load=self._noise_load(s))

    def cache_left(self, noise_offered: Sequence[float], contention: Contention | None = None) -> float:
        """What the noise leaves the cache reads in all (reads that take whatever they can get)."""
        return self.share(1, None, noise_offered, contention).cache_total


def max_min_fair(capacities: Mapping[str, float], flows: Sequence[Flow]) -> list[float]:
    """Max-min fair rates (progressive filling) of `flows` on links of `capacities` (bytes/s)."""
    rates = [0.0] * len(flows)
    left = dict(capacities)
    for f in flows:
        for n in f.path:
            if n not in left:
                raise ValueError(f"flow crosses an unknown link {n!r}")
    active = {i for i, f in enumerate(flows) if f.demand is None or f.demand > 0}
    while active:
        step = math.inf
        for n, c in left.items():
            users = sum(1 for i in active if n in flows[i].path)
            if users:
                step = min(step, c / users)
        for i in active:
            d = flows[i].demand
            if d is not None:
                step = min(step, d - rates[i])
        if not math.isfinite(step):
            raise ValueError("an elastic flow crosses no link: its rate is unbounded")
        for i in active:
            rates[i] += step
            for n in flows[i].path:
                left[n] -= step
        full = {n for n, c in left.items() if c <= _FULL * capacities[n]}
        active = {
            i for i in active if not full.intersection(flows[i].path) and _wants_more(flows[i], rates[i])
        }
    return rates


def _wants_more(flow: Flow, rate: float) -> bool:
    """An elastic flow always does; a bounded one until it has its demand."""
    demand = flow.demand
    return demand is None or rate < demand * (1 - 1e-12)


def two_links(name: str, storage_bytes_per_s: float, fabric_bytes_per_s: float, description: str) -> Topology:
    """A storage behind one network link that the noise also crosses (a lab or a laptop: one NIC)."""
    return Topology(
        name=name,
        description=description,
        links=(
            Link("storage", storage_bytes_per_s, "the storage's read bandwidth (G4 aggregate)"),
            Link("fabric", fabric_bytes_per_s, "the network link to the storage, noise included"),
        ),
        cache_path=("storage", "fabric"),
        noise_path=("fabric",),
    )


GB = 1e9
PUBLISHED_G4 = Topology(
    name="ibm-g4",
    description="IBM Redbooks MD260021 G4 test: Storage Scale ECE over Spectrum-X, one inference client",
    links=(
        Link("storage_read", 315 * GB, "storage read bandwidth, 8 servers ('up to 315 GB/s', published)"),
        Link("client_net", 80 * GB, "the inference client's network ('could use up to 80 GB/s', published)"),
        Link(
            "noise_clients_net",
            4 * 80 * GB,
            "the 4 noise clients' networks to the storage (assumed: 80 GB/s each, like the inference "
            "client; not published)",
        ),
    ),
    cache_path=("storage_read", "client_net"),
    noise_path=("noise_clients_net", "storage_read"),
    noise_clients=4,
    noise_offered_bytes_per_s=200 * GB,
    assumptions=(
        "the competing traffic reads the same storage (worst case) and does not cross the inference "
        "client's network (it comes from 4 other clients)",
        "links share max-min fair per flow: one flow per noise client, one per cache read in flight",
    ),
)
PRESETS: dict[str, Topology] = {PUBLISHED_G4.name: PUBLISHED_G4}


def bandwidth_drop(
    topology: Topology,
    cache_demand_bytes_per_s: float,
    noise_offered_bytes_per_s: float,
    noise_flows: int,
    contention: Contention | None = None,
) -> float:
    """Fraction of a cache-read demand the noise takes away (0: none), the reads as ONE flow asking for
    `cache_demand_bytes_per_s` (an average rate, as the audit reads it) beside `noise_flows` equal flows."""
    per = [noise_offered_bytes_per_s / noise_flows] * noise_flows if noise_flows > 0 else []
    quiet = topology.share(1, cache_demand_bytes_per_s, [], contention).cache_total
    noisy = topology.share(1, cache_demand_bytes_per_s, per, contention).cache_total
    return max(0.0, 1.0 - noisy / quiet) if quiet > 0 else 0.0


def from_capacities(capacities: Sequence[tuple[str, float, bool]], name: str = "bound") -> Topology:
    """The topology an audit bound states: (link, bytes/s, whether the noise crosses it) per capacity;
    the cache reads cross every one, the noise those it shares plus its sources' own (unbounded) link."""
    links = tuple(Link(n, c, "a capacity of the bound") for n, c, _ in capacities)
    src = Link("noise_sources", math.inf, "the noise sources' own links (not a bound)")
    return Topology(
        name=name,
        description="from an audit bound's capacities",
        links=(*links, src),
        cache_path=tuple(n for n, _, _ in capacities),
        noise_path=(src.name, *(n for n, _, shared in capacities if shared)),
    )


def bandwidth_reading(
    capacities: Sequence[tuple[str, float, bool]], demand: float, noise: float, noise_flows: int
) -> dict[str, object]:
    """What bandwidth alone predicts for a run whose reads average `demand` bytes/s beside `noise`
    from `noise_flows` sources, by this module's one rule (the audit's bound reads it)."""
    t = from_capacities(capacities)
    drop = bandwidth_drop(t, demand, noise, max(1, noise_flows))
    return {
        "rule": "max-min fair per flow (kvbench.model.topology): the run's reads as one flow at their "
        "average rate beside one flow per noise source",
        "bandwidth_drop": drop,
        "other_mechanisms": [f"{n} ({knob})" for n, knob, _ in OTHER_MECHANISMS] if drop < 0.01 else [],
    }
