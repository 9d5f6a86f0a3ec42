"""Load shapes: how requests are issued (one at a time, N connections kept busy, or arrivals at a rate).

Each kind says how many requests it may have in flight (`max_in_flight`): the connection
pool and the load backend both read that, so no caller inspects the kind itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from kvbench.scenario.sections import Strict, flag


def _workers_field() -> Any:
    """`workers`, the same for every load kind that can be split over load workers."""
    return Field(
        0,
        ge=0,
        le=1024,
        description="0: this process sends the load; K >= 1: K load workers share it, the concurrency "
        "(or in-flight cap) split between them: Ray actors with cluster.backend: ray, else K worker "
        "processes on this machine.",
    )


def _pin_field() -> Any:
    """`pin`, beside `workers`: where the local worker processes run."""
    return Field(
        False,
        description="With workers K >= 1 on this machine (no cluster): worker i runs pinned to the i-th "
        "core this process may use (Linux), so K workers take K cores instead of sharing whichever the "
        "scheduler gives them. Start kvbench under `taskset -c` to choose the cores.",
    )


class SequentialLoad(Strict):
    kind: Literal["sequential"] = "sequential"

    @property
    def workers(self) -> int:
        """One request at a time: always sent from this process."""
        return 0

    @property
    def pin(self) -> bool:
        return False

    @property
    def max_in_flight(self) -> int:
        return 1

    @property
    def arrival_rate(self) -> float | None:
        return None

    @property
    def paced(self) -> bool:
        """Requests start at arrival times (open loop) rather than as soon as a worker is free."""
        return False

    def requests_per_phase(self, n_prompts: int) -> int:
        return n_prompts


class ConcurrentLoad(Strict):
    kind: Literal["concurrent"] = "concurrent"
    concurrency: int = Field(
        ...,
        gt=0,
        le=100_000,
        description="Connections kept busy (closed loop).",
        json_schema_extra=flag("concurrency"),
    )
    requests: int = Field(
        ..., gt=0, le=10_000_000, description="Requests per phase.", json_schema_extra=flag("requests")
    )
    sampling: Literal["each_equally", "random"] = Field(
        "each_equally",
        description="each_equally: every prompt used requests/count times, shuffled; random: seeded draws.",
    )
    seed: int = Field(0, description="Seed for the request order.")
    workers: int = _workers_field()
    pin: bool = _pin_field()

    @property
    def max_in_flight(self) -> int:
        return self.concurrency

    @property
    def arrival_rate(self) -> float | None:
        return None

    @property
    def paced(self) -> bool:
        return False

    def requests_per_phase(self, n_prompts: int) -> int:
        return self.requests


class RateLoad(Strict):
    kind: Literal["rate"] = "rate"
    rate: float = Field(..., gt=0, description="Mean arrivals per second.")
    arrivals: Literal["poisson", "constant"] = Field("poisson", description="Inter-arrival distribution.")
    max_concurrency: int = Field(256, gt=0, description="Cap on requests in flight.")
    requests: int = Field(
        ..., gt=0, le=10_000_000, description="Requests per phase.", json_schema_extra=flag("requests")
    )
    seed: int = Field(0, description="Seed for arrivals and request order.")
    workers: int = _workers_field()
    pin: bool = _pin_field()

    @property
    def max_in_flight(self) -> int:
        return self.max_concurrency

    @property
    def arrival_rate(self) -> float | None:
        return self.rate

    @property
    def paced(self) -> bool:
        return True

    def requests_per_phase(self, n_prompts: int) -> int:
        return self.requests


Load = Annotated[SequentialLoad | ConcurrentLoad | RateLoad, Field(discriminator="kind")]
