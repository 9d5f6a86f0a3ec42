"""The lab's names, addresses and ports, and its state file.

Every name the lab creates is fixed (one lab per machine), so `kvbench lab down` can find the
pieces by name even when the state file is gone: a crash between creating a piece and writing the
state file must not leave that piece behind. The state file adds what names cannot tell (pids,
the measured throughput, the link shape actually applied) and is written after every step of
`up`, so it is never behind by more than the piece being made.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

NETNS = "kvbench-lab"  # the storage side's network namespace
VETH_HOST = "kvlab-h"  # host end of the link (IFNAMSIZ: at most 15 characters)
VETH_NS = "kvlab-s"  # storage end, moved into NETNS
DEFAULT_STATE_DIR = Path("/var/tmp/kvbench-lab")  # the store grows to GBs: not a tmpfs like /run
CONNECTOR_FILE_PREFIX = "kvlab-"  # the G4 connector names its slot files kvlab-<sha256>.kv
NOISE_FILE = "neighbour.bin"  # what the neighbour mount's reader (fio) reads over the link
SINK_PORT = 9000  # kvbench noise sink, inside the namespace
IPERF3_PORT = 5201  # iperf3 server, inside the namespace


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def state_dir() -> Path:
    """Where the lab keeps its state, keys, logs and mount points ($KVBENCH_LAB_DIR moves it)."""
    return Path(os.environ.get("KVBENCH_LAB_DIR") or DEFAULT_STATE_DIR)


class LabConfig(Strict):
    rate_mbit: float = Field(
        400.0, gt=0, le=100_000, description="Link bandwidth per direction (tc), Mbit/s."
    )
    delay_ms: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="One-way link delay (tc netem), ms. None: 0.2 where sch_netem exists, else unshaped.",
    )
    block: int = Field(
        123, ge=0, le=255, description="Third octet of the link's /30 in 169.254.0.0/16 (link-local)."
    )
    port_base: int = Field(
        8470,
        ge=1024,
        le=65000,
        description="Engine A's connector listens on base+1, B's on base+2, "
        "the raw llama-servers on base+11 and base+12 (all on 127.0.0.1).",
    )
    slots: int = Field(4, gt=0, le=64, description="llama-server -np per instance.")
    ctx: int = Field(16384, gt=0, description="Context tokens per slot.")
    threads: int | None = Field(None, gt=0, description="llama-server threads (default: all cores).")
    model: str | None = Field(None, description="GGUF model path (default: kvbench's seed-0 tiny model).")

    @property
    def host_addr(self) -> str:
        return f"169.254.{self.block}.1"

    @property
    def ns_addr(self) -> str:
        return f"169.254.{self.block}.2"

    def engine_port(self, index: int, raw: bool = False) -> int:
        return self.port_base + index + 1 + (10 if raw else 0)


class EngineInfo(Strict):
    name: str = Field(description="Instance name: a or b.")
    url: str = Field(description="Base URL of the instance's G4 connector (what scenarios target).")
    raw_url: str = Field(description="Base URL of the llama-server itself (no G4 connector).")
    server_pid: int = Field(description="llama-server process id.")
    connector_pid: int = Field(description="G4 connector process id.")
    log: str = Field(description="llama-server log file.")


class LinkShape(Strict):
    rate_mbit: float = Field(description="Bandwidth per direction, Mbit/s (tc).")
    delay_ms: float | None = Field(description="One-way delay added by netem, ms; None: not shaped.")
    qdisc: str = Field(description="The qdisc on both ends of the veth pair: netem or tbf.")
    host_addr: str = Field(description="Host end of the link.")
    ns_addr: str = Field(description="Storage end of the link (inside the namespace).")
    note: str = Field("", description="Why the delay is not shaped, when it is not.")
    host_if: str = Field(VETH_HOST, description="The host end's interface, whose counters a run samples.")


class LabState(Strict):
    config: LabConfig = Field(description="What `lab up` was asked for.")
    started_at: str = Field(description="UTC time `lab up` began.")
    step: str = Field("starting", description="The last step `up` finished (ready when complete).")
    link: LinkShape | None = Field(None, description="The link as shaped.")
    read_mbit: float | None = Field(None, description="Measured G4 read throughput, unloaded link, Mbit/s.")
    write_mbit: float | None = Field(None, description="Measured G4 write throughput, unloaded, Mbit/s.")
    sshd_pid: int | None = Field(None, description="sshd inside the namespace.")
    mounts: dict[str, str] = Field(
        default_factory=dict, description="Mount role (g4, neighbour) -> host mount point."
    )
    store: str | None = Field(None, description="The file server's directory (served from the namespace).")
    engines: list[EngineInfo] = Field(default_factory=list, description="The two llama-server instances.")
    sink: str | None = Field(None, description="kvbench noise sink address (inside the namespace).")
    iperf3: str | None = Field(None, description="iperf3 server address (inside the namespace).")
    pids: dict[str, int] = Field(default_factory=dict, description="Every other process the lab started.")

    def with_(self, **update: object) -> LabState:
        # validated again: model_copy(update=...) alone would accept a wrong type silently
        return LabState.model_validate({**dict(self), **update})


def state_path(root: Path | None = None) -> Path:
    return (root or state_dir()) / "state.json"


def save_state(state: LabState, root: Path | None = None) -> None:
    path = state_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.model_dump(mode="json"), indent=2) + "\n")
    tmp.replace(path)


def load_state(root: Path | None = None) -> LabState | None:
    """The state file, or None when there is none or it cannot be read (down then works by name)."""
    path = state_path(root)
    try:
        return LabState.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
