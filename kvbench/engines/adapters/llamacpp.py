"""llama.cpp's llama-server: slot erase as the reset, its counters, and its tiers over HTTP.

Reset: every slot's KV (G1) is erased (`POST /slots/{id}?action=erase`). The RAM prompt cache
(--cache-ram, G2) has no HTTP reset: it only reloads a prompt sharing >= 25% of a cached one,
which salted prompts never do; serve with --cache-ram 0 for an erase that empties everything.

Disk tier: llama-server started with ``--slot-save-path DIR`` writes a slot's KV cache to
DIR/FILENAME with ``POST /slots/{id}?action=save {"filename": ...}`` and reads it back with
``action=restore``. The disk-tier TTFT measurement is

    cold request -> save -> erase -> restore -> warm request (TTFT measured here)

so the restore time is NOT inside the warm request's TTFT: it is a separate call whose duration
(``timings.restore_ms`` from the server, and the client-side wall time) is returned and must be
added when quoting a "TTFT from disk" figure (see EngineAdapter.disk_round_trip). Requests are
pinned to the saved slot with ``id_slot``.

llama-server answers "Keep-Alive" but closes the connection after every streamed response; the
run's session (kvbench.client.make_session) copes with that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from kvbench.engines.adapters.base import (
    ControlHTTP,
    EngineAdapter,
    GaugeRef,
    TierCapacity,
    TierOperationFailed,
    TransferCounter,
)
from kvbench.engines.adapters.registry import register


class SlotActionError(TierOperationFailed):
    """llama-server refused a slot action (no --slot-save-path, unknown slot, missing file)."""


async def slot_action(
    session: Any,
    base_url: str,
    slot: int,
    action: str,
    filename: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One POST /slots/{slot}?action=...; returns the server's JSON plus `client_ms`."""
    body = {"filename": filename} if filename is not None else None
    t0 = time.perf_counter_ns()
    async with session.post(f"{base_url}/slots/{slot}?action={action}", json=body, headers=headers) as resp:
        data: Any = await resp.json(content_type=None)
        if resp.status != 200 or not isinstance(data, dict):
            raise SlotActionError(f"slot {slot} {action}: HTTP {resp.status} {str(data)[:200]}")
    data["client_ms"] = (time.perf_counter_ns() - t0) / 1e6
    return data


@register
class LlamacppAdapter(EngineAdapter):
    name = "llamacpp"
    offload_off_how = "llama-server with --cache-ram 0 and no --slot-save-path (slot KV, the G1, stays)"
    description = "llama.cpp's llama-server"
    reset_method = "POST"
    reset_path = "/slots/{slot}?action=erase"
    # llama-server --metrics (checked against the real server): prompt_tokens_cached_total sums
    # the per-request cached tokens; prompt_tokens_total counts only the tokens it COMPUTED, so
    # there is no queried-tokens counter (queried = cached + computed).
    hit_counters = ("llamacpp:prompt_tokens_cached_total",)
    source_counters = ("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total")
    # kvbench_lab_: the lab's G4 connector in front of llama-server (kvbench/lab/connector.py)
    metric_prefixes = ("llamacpp:", "kvbench_lab_")
    # llama-server --metrics: seconds spent on prompt processing and on generation, all slots
    time_counters: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "prefill": ("llamacpp:prompt_seconds_total",),
        "decode": ("llamacpp:tokens_predicted_seconds_total",),
    }
    owned_by_words = ("llamacpp", "llama.cpp")
    metric_words = ("llamacpp:",)
    detect_order = 40
    # llama-server --metrics (tools/server/server.cpp): requests waiting for a slot; the KV cache's used share
    # (kv_cache_usage_ratio: in older builds only; absent, the column is empty)
    # the lab's G4 connector in front of llama-server (kvbench/lab/connector.py): bytes restored from
    # and saved to its G4 directory (llama-server itself moves no KV between tiers it counts)
    transfer_counters: ClassVar[tuple[TransferCounter, ...]] = (
        TransferCounter(
            "kvbench_lab_g4_restore_bytes_total", "onboard", "G4", source="kvbench/lab/connector.py"
        ),
        TransferCounter(
            "kvbench_lab_g4_save_bytes_total", "offload", "G4", source="kvbench/lab/connector.py"
        ),
    )
    queue_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("llamacpp:requests_deferred", "requests", source="tools/server/server.cpp (/metrics)"),
    )
    kv_usage_gauges: ClassVar[tuple[GaugeRef, ...]] = (
        GaugeRef("llamacpp:kv_cache_usage_ratio", "fraction", source="tools/server/server.cpp (/metrics)"),
    )
    tokenize_styles = ("llamacpp", "vllm")
    extra_body: ClassVar[Mapping[str, Any]] = {"cache_prompt": True}

    # GET /props (tools/server/server-context.cpp get_res_props): total_slots (-np) and
    # default_generation_settings.n_ctx, the context of one slot. The RAM prompt cache's size
    # (--cache-ram MiB, server_prompt_cache in tools/server/server-task.cpp) is not reported over
    # HTTP: give it as `kvbench sweep --tiers G2=<MiB>MiB,kv=<KV bytes per token>`.
    capacity_paths = ("/props",)

    def tier_capacities(self, answers: Mapping[str, str]) -> list[TierCapacity]:
        """G1: each slot keeps one prompt's KV (up to n_ctx tokens); a new prompt takes the least
        recently used slot (server-context.cpp get_available_slot), so G1 holds total_slots prompts."""
        try:
            props = json.loads(answers.get("/props") or "null")
        except ValueError:
            return []
        if not isinstance(props, dict):
            return []
        slots, n_ctx = props.get("total_slots"), (props.get("default_generation_settings") or {}).get("n_ctx")
        if not isinstance(slots, int) or not isinstance(n_ctx, int) or slots < 1 or n_ctx < 1:
            return []
        source = f"adapter: llamacpp /props (total_slots={slots}, n_ctx={n_ctx} per slot)"
        return [TierCapacity("G1", n_ctx, sequences=slots, source=source)]

    async def slots(self, http: ControlHTTP) -> list[int]:
        """The server's slot ids (GET /slots); [0] when it does not list them."""
        status, body = await http.request("GET", "/slots")
        if status == 200 and isinstance(body, list):
            return [int(s.get("id", i)) for i, s in enumerate(body) if isinstance(s, dict)]
        return [0]

    async def reset_paths(self, http: ControlHTTP) -> list[str]:
        assert self.reset_path is not None
        return [self.reset_path.format(slot=s) for s in await self.slots(http)]

    def pin_request(self, slot: int) -> dict[str, Any]:
        return {"id_slot": slot}

    async def save_slot(self, http: ControlHTTP, slot: int, filename: str) -> dict[str, Any]:
        return await slot_action(http.session, http.base_url, slot, "save", filename, http.headers)

    async def erase_slot(self, http: ControlHTTP, slot: int) -> dict[str, Any]:
        return await slot_action(http.session, http.base_url, slot, "erase", None, http.headers)

    async def restore_slot(self, http: ControlHTTP, slot: int, filename: str) -> dict[str, Any]:
        return await slot_action(http.session, http.base_url, slot, "restore", filename, http.headers)
