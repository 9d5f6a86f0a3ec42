"""Background traffic for the noisy phases of the throughput test, discriminated on `kind`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvbench.scenario.sections import Strict


class NoNoise(Strict):
    kind: Literal["none"] = "none"


class Placed(Strict):
    """Noise that a Ray cluster can spread: how many clients, and on which nodes."""

    clients: int = Field(
        1,
        ge=1,
        le=1024,
        description="Noise clients, each running this generator (cluster.backend: ray; the published "
        "test used 4 machines). tcp: rate_bytes_per_s is the total, split evenly; iperf3: servers dealt out.",
    )
    placement: Literal["spread", "pack"] = Field(
        "spread",
        description="spread: one client per node while nodes last (the driver's node last); "
        "pack: fill a node's CPUs first.",
    )


class TcpNoise(Placed):
    kind: Literal["tcp"] = "tcp"
    targets: list[str] = Field(
        default_factory=list,
        description="host:port sinks (`kvbench noise sink`). Empty with the mock: its fabric port.",
    )
    senders: int = Field(4, gt=0, le=64, description="Parallel sender processes (the published test used 4).")
    rate_bytes_per_s: float | None = Field(
        None,
        gt=0,
        description="Total offered rate, bytes/s (the senders are rate-controlled); absent = as fast as "
        "possible. Against the embedded mock's fabric port it is the modelled offered load: each sender "
        "declares its share and sends only a few real bytes to confirm it.",
    )
    chunk_bytes: int = Field(262_144, gt=0, le=64 * 1024 * 1024, description="Bytes per send call.")
    max_duration_s: float = Field(3600.0, gt=0, description="Hard stop for the generator.")


class Iperf3Noise(Placed):
    kind: Literal["iperf3"] = "iperf3"
    servers: list[str] = Field(..., min_length=1, description="iperf3 servers, host or host:port.")
    parallel: int = Field(4, gt=0, le=128, description="Streams per client (-P).")
    bitrate: str | None = Field(None, description="iperf3 -b target, e.g. 10G; absent = unlimited.")
    max_duration_s: float = Field(3600.0, gt=0, description="Hard stop for the generator.")


class FioNoise(Placed):
    kind: Literal["fio"] = "fio"
    path: str = Field(..., description="Directory or file to contend on.")
    rw: Literal["read", "write", "randread", "randwrite", "rw", "randrw"] = Field(
        "read", description="fio rw."
    )
    block_size: str = Field("1M", description="fio bs.")
    jobs: int = Field(4, gt=0, le=256, description="fio numjobs.")
    size: str = Field("1G", description="fio size per job.")
    max_duration_s: float = Field(3600.0, gt=0, description="Hard stop for the generator.")


Noise = Annotated[NoNoise | TcpNoise | Iperf3Noise | FioNoise, Field(discriminator="kind")]
