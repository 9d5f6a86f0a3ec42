"""The noise flows the fabric port sees now, and what they leave the G4 reads: the engine's view.

The sink (fabric.py) reports each flow's offered rate; this holds them and answers, per number of
G4 reads in flight, how the profile's topology is shared (max-min fair per flow, timing.g4_share),
caching each answer until the flows change, since the engine asks on every rate change and every
request. Pure apart from that cache: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbench.mock.costs.timing import ModelParams
from kvbench.model.topology import Share


class NoiseLink:
    def __init__(self, params: ModelParams) -> None:
        self.params = params
        self.flows: tuple[float, ...] = ()  # offered rate of each noise flow now (modelled bytes/s)
        self._shares: dict[int, Share] = {}  # k reads in flight -> how the topology is shared
        self._left: float | None = None
        self._latency: float | None = None

    def set_flows(self, offered: Sequence[float]) -> None:
        self.flows = tuple(r for r in offered if r > 0)
        self._shares.clear()
        self._left = self._latency = None

    def share(self, reads: int) -> Share:
        s = self._shares.get(reads)
        if s is None:
            s = self._shares[reads] = self.params.g4_share(reads, self.flows)
        return s

    def read_rate(self, reads: int) -> float:
        """Each of `reads` G4 reads' rate in real time (bytes per real second)."""
        return self.share(reads).cache_each / self.params.time_scale

    def achieved(self, reads: int) -> float:
        """Noise achieved beside `reads` G4 reads (modelled bytes/s; never above a capacity)."""
        return self.share(reads).noise_achieved if self.flows else 0.0

    def left(self) -> float:
        """What the noise leaves the G4 reads in all (modelled bytes/s, reads taking all they can)."""
        if self._left is None:
            self._left = self.params.topology.cache_left(self.flows, self.params.contention)
        return self._left

    def latency_s(self) -> float:
        """G4 access latency in model seconds, with latency under load when that knob is on."""
        if self._latency is None:
            self._latency = self.params.g4_latency_s(self.flows)
        return self._latency
