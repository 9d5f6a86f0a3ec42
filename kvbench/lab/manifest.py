"""What a run records when its target is a lab engine: the link's shape and what was measured.

The runner calls lab_manifest(base_url); it reads the lab's state file only (no root needed, no
commands run) and returns None for every other target, so runs elsewhere are unchanged.
lab_link_interfaces(base_url) names the link's host end for the run's sampler, () elsewhere.
"""

from __future__ import annotations

from typing import Any

from kvbench.lab.config import load_state

BANNER = "measured on the kvbench lab (real engine, shaped link), not on production hardware"


def lab_manifest(*base_urls: str | None) -> dict[str, Any] | None:
    state = load_state()
    if state is None or state.link is None:
        return None
    urls = {u.rstrip("/") for u in base_urls if u}
    engines = [
        {"instance": e.name, "url": e.url, "via": "g4-connector" if e.url in urls else "llama-server"}
        for e in state.engines
        if e.url in urls or e.raw_url in urls
    ]
    if not engines:
        return None
    return {
        "banner": BANNER,
        "engines": engines,
        "link": state.link.model_dump(mode="json"),
        "unloaded_read_mbit": state.read_mbit,
        "unloaded_write_mbit": state.write_mbit,
        "file_service": "sshfs (SFTP over ssh) from a network namespace, direct_io, no attribute cache",
        "g4_mount": state.mounts.get("g4"),
        "neighbour_mount": state.mounts.get("neighbour"),
        "lab_started_at": state.started_at,
    }


def lab_link_interfaces(*base_urls: str | None) -> tuple[str, ...]:
    """The link's host-end interface when a target is a lab engine (the run samples its counters), else ()."""
    if lab_manifest(*base_urls) is None:
        return ()
    state = load_state()
    return (state.link.host_if,) if state is not None and state.link is not None else ()
