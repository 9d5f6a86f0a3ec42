"""The source engine's cache shape: llama.cpp's slots, where a shared prefix cache would be wrong.

A twin's hits normally come from one shared tier (G4) that every request can read. llama-server
keeps one prompt per slot and moves prompts through a RAM cache (kvbench.mock.costs.slots), so under
load a prompt whose slot is busy is computed again: on this machine 8 prompts over 28 connections
missed 42 of 112 times where a shared cache misses 8, and a shared-cache twin ran 3.7x fast. For a
llama.cpp source the twin takes that shape: the sweep's warm rows were slot hits, so their fitted
onboarding becomes the cost of resuming a slot (G1), a restore from RAM copies the whole entry at
host-memory speed (G2), and no shared tier (G3, G4) holds anything.
"""

from __future__ import annotations

from typing import Any

SLOT_ENGINES = ("llamacpp",)  # engines whose server caches per slot (kvbench.engines names)
SIMILARITY = 0.1  # llama-server's --slot-prompt-similarity default
COPY_HEADROOM = 10.0  # a RAM restore's bandwidth, this many times the fitted resume bandwidth


def applies(engine: str | None) -> bool:
    return engine in SLOT_ENGINES


def shape(draft: dict[str, Any], resume: tuple[float, float], slots: int, notes: list[str]) -> None:
    """Make `draft` (a twin profile as a dict) cache as llama.cpp's slots do; `resume` is the fitted
    (latency, bandwidth) of the sweep's warm rows."""
    latency, bw = resume
    tiers = draft["tiers"]
    tiers["G1"] |= {
        "enabled": True,
        "latency_s": latency,
        "read_bandwidth_bytes_per_s": bw,
        # each slot resumes on its own (the prompt's tokenizing and matching, not a shared link)
        "aggregate_bandwidth_bytes_per_s": bw * max(1, slots),
    }
    tiers["G2"] |= {
        "enabled": True,
        "latency_s": 0.0,
        "read_bandwidth_bytes_per_s": COPY_HEADROOM * bw,
        "aggregate_bandwidth_bytes_per_s": None,
    }
    for name in ("G3", "G4"):
        tiers[name]["enabled"] = False
    draft["gpu"]["slot_cache"] = {"similarity": SIMILARITY, "ram_tokens": None}
    notes.append(
        f"llama.cpp's cache shape: {slots} slots of one prompt each, prompts moved through a RAM cache "
        "taken to hold them all (gpu.slot_cache; give ram_tokens if --cache-ram is smaller), so a prompt "
        f"whose slot is busy is computed again; a slot hit costs the sweep's warm rows ({latency * 1e3:.3g} "
        f"ms + bytes / {bw / 1e9:.3g} GB/s, G1), a restore copies the entry at {COPY_HEADROOM:g}x that"
    )
