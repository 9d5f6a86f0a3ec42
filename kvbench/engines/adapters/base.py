"""EngineAdapter: everything kvbench knows about one kind of inference server at run time.

One subclass per engine, one module each, registered in `kvbench.engines.adapters`. Everything
engine-specific that the run needs is asked of the adapter, never hand-dispatched on a name:

- cache reset: `reset()` (with `reset_paths()`, `reset_succeeded()`, `reset_gives_up()`)
- counters: `hit_counters`, `query_counters`, `source_counters`, `tier_counter`; `hits()`,
  `queries()`, `sources()`, `tier_hits()` read them from per-phase deltas; `time_counters` and
  `time_split()` the engine's own seconds per request part (queue, prefill, decode, onboarding),
  for the report's time attribution; `metric_prefixes` says which /metrics families are kept;
  `transfer_counters`, `queue_gauges`, `kv_usage_gauges` what the report reads over time
- detection: `owned_by_words` (GET /v1/models) and `metric_words` (GET /metrics), asked in
  `detect_order`
- prompts: `tokenize_styles` (the /tokenize dialects, first tried first), `extra_body` (added to
  every timed request)
- tiers: `evict_fast_tiers()`, `pin_request()`, `save_slot()` / `erase_slot()` /
  `restore_slot()`, `disk_round_trip()`; an engine without one raises `TierUnsupported`.
- offload arms: `offload_off_overrides()` (a switch the run can flip itself, or None) and
  `offload_off_how` (how to restart the engine with the GPU prefix cache on, offload off)
- tier sizes: `capacity_paths` (GETs) and `tier_capacities()` (what their answers say each tier
  holds, for the tier-cliff map's prediction); `tier_of_source` names the tier a hit came from by
  `tier_counter`'s label value.

The class attributes are the rules; the methods are the I/O that uses them. The rules are pure,
so a contract test runs every registered adapter without a network. Importing this module is
cheap (stdlib only): the CLI builds its help text from the registry.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from kvbench.errors import KvbenchError


class ControlHTTP(Protocol):
    """The untimed JSON client an adapter talks through (today `kvbench.client.control.ControlClient`)."""

    base_url: str
    headers: dict[str, str]
    session: Any

    async def request(self, method: str, path: str, json_body: Any = None) -> tuple[int, Any]: ...

    async def get_text(self, path: str) -> tuple[int, str]: ...


class TierUnsupported(KvbenchError):
    """The engine has no such tier operation (exit 1, like every refused cache operation)."""


class TierOperationFailed(KvbenchError):
    """The server refused a tier operation it should support (e.g. no --slot-save-path)."""


def _network_errors() -> tuple[type[BaseException], ...]:
    import aiohttp  # lazy: the registry is imported for `kvbench --help`

    return (aiohttp.ClientError, TimeoutError)


def first_present_sum(deltas: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    """Total delta of the first of `names` present in `deltas` (any labels); None if none is."""
    for name in names:
        found = [v for k, v in deltas.items() if k == name or k.startswith(name + "{")]
        if found:
            return sum(found)
    return None


@dataclass(frozen=True)
class TransferCounter:
    """A cumulative counter of KV moved between tiers; the report turns its rate into GB/s per slice.

    `unit` says what one count is: bytes, blocks (x the engine's block of KV) or tokens (x KV bytes
    per token, from the model's geometry). A sample counts when it carries every label of `match`
    (values compared without case); its tier is `tier`, or the value of its `tier_label`."""

    name: str
    direction: str  # onboard: towards the GPU (a hit read back); offload: away from it (a store)
    tier: str = ""  # G2 host memory, G3 local disk, G4 shared storage; "" = from tier_label
    unit: str = "bytes"
    match: tuple[tuple[str, str], ...] = ()
    tier_label: str | None = None
    source: str = ""  # where the name comes from (the engine's own source)
    superseded_by: str = ""  # left out when this counter is present: the same bytes, newer name


@dataclass(frozen=True)
class GaugeRef:
    """A gauge the report averages per slice (queue length, KV usage); `match` as TransferCounter's."""

    name: str
    unit: str = ""  # requests, fraction (0-1), bytes
    match: tuple[tuple[str, str], ...] = ()
    source: str = ""


@dataclass(frozen=True)
class TierCapacity:
    """What one cache tier holds, as the server (or the user) states it: KV `tokens`, or `bytes`
    (tokens = bytes / KV bytes per token), or whole `sequences` of at most `tokens` each (llama.cpp's
    slots). It allocates in blocks of `block_tokens`; `source` says where each figure came from."""

    tier: str
    tokens: float | None = None
    bytes: float | None = None
    sequences: int | None = None
    block_tokens: int = 1
    source: str = ""


class EngineAdapter:
    """Base adapter: a server with no known reset, counters or tiers (the `generic` engine)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""  # a few words, for the CLI help and docs

    # -- cache reset ----------------------------------------------------------------------------
    reset_method: ClassVar[str | None] = None
    reset_path: ClassVar[str | None] = None
    reset_hint: ClassVar[str] = ""  # appended when the reset endpoint is missing (404)
    busy_statuses: ClassVar[tuple[int, ...]] = ()  # a reset refused because the server is busy

    # -- counters (cumulative; only per-phase deltas are ever read) -----------------------------
    hit_counters: ClassVar[tuple[str, ...]] = ()  # prefix-cache HIT tokens, first present wins
    query_counters: ClassVar[tuple[str, ...]] = ()  # QUERIED tokens, first present wins
    source_counters: ClassVar[tuple[str, ...]] = ()  # prompt tokens broken down by where they came from
    metric_prefixes: ClassVar[tuple[str, ...]] = ()  # /metrics families kept in metrics.jsonl
    # (counter, label): cached prompt tokens by where they came from, e.g. the mock's tier="G4"
    tier_counter: ClassVar[tuple[str, str] | None] = None
    # seconds the engine itself spent per part of a request (report.attribution's components:
    # queue, prefill, onboard_G2/G3/G4, decode), each the first of its counters present
    time_counters: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # over time (kvbench.report.slices.frame): KV moved per tier, requests queued, KV cache held; the
    # first gauge present wins
    transfer_counters: ClassVar[tuple[TransferCounter, ...]] = ()
    queue_gauges: ClassVar[tuple[GaugeRef, ...]] = ()
    kv_usage_gauges: ClassVar[tuple[GaugeRef, ...]] = ()

    # -- detection ------------------------------------------------------------------------------
    owned_by_words: ClassVar[tuple[str, ...]] = ()  # substrings of /v1/models owned_by
    metric_words: ClassVar[tuple[str, ...]] = ()  # substrings of /metrics that name this engine
    detect_order: ClassVar[int] = 100  # lower is asked first (the mock before vLLM: it speaks vllm:)

    # -- requests -------------------------------------------------------------------------------
    tokenize_styles: ClassVar[tuple[str, ...]] = ("vllm", "llamacpp")
    extra_body: ClassVar[Mapping[str, Any]] = {}

    # -- tiers ----------------------------------------------------------------------------------
    fast_tier_reset_path: ClassVar[str | None] = None  # empties the fast tiers, keeps the lower ones
    capacity_paths: ClassVar[tuple[str, ...]] = ()  # GETs whose answers tier_capacities() reads
    tier_of_source: ClassVar[Mapping[str, str]] = {}  # tier_counter label value -> G1..G4
    # -- offload arms: how to serve this engine with its GPU prefix cache on and offload off
    offload_off_how: ClassVar[str] = "the same server started without its offload tiers"

    def offload_off_overrides(self) -> dict[str, Any] | None:
        """Embedded-mock overrides (`target.mock_overrides` keys) that turn offload off and keep the
        GPU prefix cache, without a restart; None: the server must be restarted as `offload_off_how`
        says (kvbench.run.arms then asks for that server's URL)."""
        return None

    @property
    def engine(self) -> str:
        """The engine's name (the older CacheAdapter spelling)."""
        return self.name

    @property
    def can_reset(self) -> bool:
        return self.reset_path is not None and self.reset_method is not None

    # -- detection rules (pure) -----------------------------------------------------------------

    def owns(self, owned_by: str) -> bool:
        """Does a /v1/models `owned_by` value (lower-cased) name this engine?"""
        return any(word in owned_by for word in self.owned_by_words)

    def speaks(self, metrics_text: str) -> bool:
        """Does a /metrics exposition carry this engine's metric names?"""
        return any(word in metrics_text for word in self.metric_words)

    # -- reset rules (pure) ---------------------------------------------------------------------

    def reset_succeeded(self, status: int, body: Any) -> bool:
        if status >= 400:
            return False
        # newer vLLM answers 200 {"success": false} when it did NOT reset
        return not (isinstance(body, dict) and body.get("success") is False)

    def reset_gives_up(self, status: int) -> bool:
        """A refusal that retrying cannot cure: the endpoint does not exist."""
        return status == 404

    # -- counter rules (pure) -------------------------------------------------------------------

    def hits(self, deltas: Mapping[str, float]) -> float | None:
        return first_present_sum(deltas, self.hit_counters)

    def queries(self, deltas: Mapping[str, float]) -> float | None:
        return first_present_sum(deltas, self.query_counters)

    def sources(self, deltas: Mapping[str, float]) -> dict[str, float]:
        """Every delta of a source counter, by its name and labels."""
        return {
            k: v
            for k, v in deltas.items()
            if any(k == n or k.startswith(n + "{") for n in self.source_counters)
        }

    def tier_hits(self, deltas: Mapping[str, float]) -> dict[str, float]:
        """Delta of `tier_counter` by the value of its label ({} where the engine has none)."""
        if self.tier_counter is None:
            return {}
        name, label = self.tier_counter
        out: dict[str, float] = {}
        for key, value in deltas.items():
            if key.startswith(name + "{") and (
                m := re.search(rf'(?:^|[{{,]){re.escape(label)}="([^"]*)"', key)
            ):
                out[m.group(1)] = out.get(m.group(1), 0.0) + value
        return out

    def time_split(self, deltas: Mapping[str, float]) -> dict[str, float]:
        """Seconds per request component from a phase's counter deltas ({} where none is present)."""
        out: dict[str, float] = {}
        for component, names in self.time_counters.items():
            value = first_present_sum(deltas, names)
            if value is not None:
                out[component] = value
        return out

    def tier_capacities(self, answers: Mapping[str, str]) -> list[TierCapacity]:
        """Each tier's size from the bodies of `capacity_paths` (path -> text); [] when unknown."""
        return []

    def pin_request(self, slot: int) -> dict[str, Any]:
        """Body fields that pin a request to one slot; {} where the engine has no slots."""
        return {}

    # -- reset (I/O) ----------------------------------------------------------------------------

    async def reset_paths(self, http: ControlHTTP) -> list[str]:
        """The calls one reset makes (llama.cpp: one per slot)."""
        return [self.reset_path] if self.reset_path is not None else []

    async def reset(self, http: ControlHTTP, attempts: int = 5) -> tuple[bool, str]:
        """Ask the server to drop its prefix cache. Returns (done, detail)."""
        method = self.reset_method
        if not self.can_reset or method is None:
            return False, f"engine '{self.name}' has no cache-reset call"
        paths = await self.reset_paths(http)
        detail = ""
        for attempt in range(attempts):
            all_ok = True
            for path in paths:
                try:
                    status, body = await http.request(method, path)
                except _network_errors() as exc:
                    return False, f"{method} {path}: {type(exc).__name__}"
                if not self.reset_succeeded(status, body):
                    all_ok = False
                    detail = f"{method} {path} answered {status} {str(body)[:120]}"
                    if self.reset_gives_up(status):
                        return False, detail + self.reset_hint
            if all_ok:
                return True, "reset"
            await asyncio.sleep(0.5 * (attempt + 1))  # e.g. SGLang answers 400 while busy
        return False, detail

    # -- tiers (I/O) ----------------------------------------------------------------------------

    async def evict_fast_tiers(self, http: ControlHTTP) -> dict[str, Any]:
        """Empty the fast tiers (G1, G2) and keep the lower ones, so a warm hit must come from below."""
        path = self.fast_tier_reset_path
        if path is None:
            raise TierUnsupported(f"engine '{self.name}' has no call that evicts only the fast tiers")
        status, body = await http.request("POST", path)
        if not self.reset_succeeded(status, body):
            raise TierOperationFailed(f"the server refused a tier reset (HTTP {status})")
        return {}

    async def save_slot(self, http: ControlHTTP, slot: int, filename: str) -> dict[str, Any]:
        raise TierUnsupported(f"engine '{self.name}' cannot save a slot's KV cache to disk")

    async def erase_slot(self, http: ControlHTTP, slot: int) -> dict[str, Any]:
        raise TierUnsupported(f"engine '{self.name}' cannot erase one slot's KV cache")

    async def restore_slot(self, http: ControlHTTP, slot: int, filename: str) -> dict[str, Any]:
        raise TierUnsupported(f"engine '{self.name}' cannot restore a slot's KV cache from disk")

    async def disk_round_trip(self, http: ControlHTTP, slot: int, filename: str) -> dict[str, Any]:
        """Save `slot` to disk, erase it, restore it: the disk tier. Sizes and times (ms) of each step.

        The restore is its own call, so its time is NOT inside the next request's TTFT: quote
        "TTFT from disk" as warm TTFT + restore_client_ms.
        """
        saved = await self.save_slot(http, slot, filename)
        erased = await self.erase_slot(http, slot)
        restored = await self.restore_slot(http, slot, filename)
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
