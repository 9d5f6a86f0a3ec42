"""Where the generators run: this machine (local), or a Ray cluster's nodes (`cluster: ray`).

With `backend: ray`, noisy phases run `noise.clients` noise clients as Ray actors placed on the
nodes (`noise.placement`), and `load.workers: K` (K >= 1) sends the load from K worker actors
instead of this process. Prompts, cold-start verification, resets, /metrics and the run
directory stay with this kvbench (the driver). `kvbench run --cluster ray[://HOST:PORT]` sets it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from kvbench.scenario.sections import Strict

_ADDRESS = re.compile(r"auto|ray://[^\s:/]+:\d{1,5}|[^\s:/]+:\d{1,5}")


class ClusterSection(Strict):
    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: everything in this process; ray: noise clients / load workers as Ray actors.",
    )
    address: str = Field(
        "auto",
        description="auto (RAY_ADDRESS, else the cluster this machine is a node of, else a local Ray "
        "started for the run), ray://HOST:PORT (a cluster's client server) or HOST:PORT (its GCS).",
    )
    cpus_per_noise_client: float = Field(
        1.0, ge=0, le=1024, description="Ray CPUs each noise client reserves on its node (0: none)."
    )
    cpus_per_load_worker: float = Field(
        1.0, ge=0, le=1024, description="Ray CPUs each load worker reserves on its node (0: none)."
    )
    start_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="An actor not running by then is recorded as failed to start."
    )
    ship_code: bool = Field(
        True, description="Send this kvbench to the nodes with the job (runtime_env py_modules)."
    )

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        v = v.strip()
        if not _ADDRESS.fullmatch(v):
            raise ValueError(f"'{v}' is not auto, ray://HOST:PORT or HOST:PORT")
        return v


def parse_cluster_flag(text: str) -> dict[str, str]:
    """`--cluster local | ray | ray://HOST:PORT` -> the scenario keys it sets."""
    value = text.strip()
    if value == "local":
        return {"cluster.backend": "local"}
    if value == "ray":
        return {"cluster.backend": "ray"}
    if value.startswith("ray://"):
        return {"cluster.backend": "ray", "cluster.address": value}
    from kvbench.errors import UsageError

    raise UsageError(f"--cluster {text!r}: expected local, ray or ray://HOST:PORT")
