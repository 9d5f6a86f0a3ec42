"""llama.cpp's lower tiers over HTTP: slot save / erase / restore (the disk tier).

llama-server started with ``--slot-save-path DIR`` writes a slot's KV cache to DIR/FILENAME with
``POST /slots/{id}?action=save {"filename": ...}`` and reads it back with ``action=restore``;
``action=erase`` drops the slot's KV. The disk-tier TTFT measurement is

    cold request -> save -> erase -> restore -> warm request (TTFT measured here)

so the restore time is NOT inside the warm request's TTFT: it is a separate call whose duration
(``timings.restore_ms`` from the server, and the client-side wall time) is returned here and must
be added when quoting a "TTFT from disk" figure. See `disk_round_trip`.

Use a session without keep-alive (``aiohttp.TCPConnector(force_close=True)``): llama-server
answers "Keep-Alive" but closes the connection after every streamed response, and a request sent
at once on that pooled connection fails with ServerDisconnected.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp


class SlotActionError(RuntimeError):
    pass


async def slot_action(
    session: aiohttp.ClientSession, base_url: str, slot: int, action: str, filename: str | None = None
) -> dict[str, Any]:
    """One POST /slots/{slot}?action=...; returns the server's JSON plus `client_ms`."""
    body = {"filename": filename} if filename is not None else None
    t0 = time.perf_counter_ns()
    async with session.post(f"{base_url}/slots/{slot}?action={action}", json=body) as resp:
        data: Any = await resp.json(content_type=None)
        if resp.status != 200 or not isinstance(data, dict):
            raise SlotActionError(f"slot {slot} {action}: HTTP {resp.status} {str(data)[:200]}")
    data["client_ms"] = (time.perf_counter_ns() - t0) / 1e6
    return data


async def disk_round_trip(
    session: aiohttp.ClientSession, base_url: str, slot: int, filename: str
) -> dict[str, Any]:
    """Save `slot` to disk, erase it, restore it. Returns sizes and times (ms) of each step."""
    saved = await slot_action(session, base_url, slot, "save", filename)
    erased = await slot_action(session, base_url, slot, "erase")
    restored = await slot_action(session, base_url, slot, "restore", filename)
    return {
        "n_saved": saved.get("n_saved"),
        "bytes_written": saved.get("n_written"),
        "save_ms": (saved.get("timings") or {}).get("save_ms"),
        "n_erased": erased.get("n_erased"),
        "n_restored": restored.get("n_restored"),
        "bytes_read": restored.get("n_read"),
        "restore_ms": (restored.get("timings") or {}).get("restore_ms"),
        "restore_client_ms": restored["client_ms"],
    }
