"""Moved: llama.cpp's slot save / erase / restore now live in kvbench.engines.adapters.llamacpp
(`LlamacppAdapter.disk_round_trip` and friends). Kept for importers of the old names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench.engines.adapters import get_adapter
from kvbench.engines.adapters.llamacpp import SlotActionError, slot_action

__all__ = ["SlotActionError", "disk_round_trip", "slot_action"]


@dataclass
class _Session:
    session: Any
    base_url: str
    headers: dict[str, str] = field(default_factory=dict)

    async def request(self, method: str, path: str, json_body: Any = None) -> tuple[int, Any]:
        raise NotImplementedError

    async def get_text(self, path: str) -> tuple[int, str]:
        raise NotImplementedError


async def disk_round_trip(session: Any, base_url: str, slot: int, filename: str) -> dict[str, Any]:
    """Save `slot` to disk, erase it, restore it. Returns sizes and times (ms) of each step."""
    return await get_adapter("llamacpp").disk_round_trip(_Session(session, base_url), slot, filename)
