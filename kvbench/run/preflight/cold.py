"""Cold start, by rule: the verdict on a cold-start probe, and the engine-adapter names the run
has always imported from here.

Cold must be guaranteed, not hoped for. Two mechanisms, used together:
1. the per-run salt at the start of every prompt (kvbench.prompts): nothing an
   earlier run cached can match, on any server;
2. where the engine allows, a reset of its prefix cache, VERIFIED by a probe:
   send a probe prompt, reset, send it again; the second answer must report
   cached_tokens == 0 (or, when the server does not report cached tokens, a
   zero delta of its hit counter). BOTH probes must succeed: a failed first
   probe cached nothing, so a clean second one proves nothing about the reset.

How each engine resets, counts and is detected lives in kvbench.engines.adapters (one module
per engine); this module holds the rule that turns a reset and two probes into a verdict.
"""

from __future__ import annotations

from typing import Protocol

from kvbench.client.control import ControlClient
from kvbench.engines.adapters import EngineAdapter

__all__ = ["ProbeRecord", "cold_probe_verdict", "reset_cache"]


async def reset_cache(adapter: EngineAdapter, http: ControlClient, attempts: int = 5) -> tuple[bool, str]:
    """Ask the server to drop its prefix cache. Returns (done, detail)."""
    return await adapter.reset(http, attempts)


class ProbeRecord(Protocol):
    """What the verdict reads of a probe request (a kvbench.client.RequestRecord)."""

    @property
    def ok(self) -> bool: ...
    @property
    def error_type(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def cached_tokens(self) -> int | None: ...


def cold_probe_verdict(
    first: ProbeRecord, second: ProbeRecord, hit_delta: float | None
) -> tuple[bool | None, str]:
    """(verified, detail) of one send-reset-send probe whose reset the server accepted.

    True: both probes answered and the second found nothing cached. None: cannot say (a probe
    failed, or the server reports neither cached_tokens nor a hit counter). False: the second
    probe still found cached tokens, so the reset did not empty the cache.
    """
    failed = [
        f"{which} probe failed: {p.error_type}: {str(p.error_message or '')[:160]}"
        for which, p in (("first", first), ("second", second))
        if not p.ok
    ]
    if failed:
        return None, "; ".join(failed) + " (a cold start needs both probes answered)"
    if second.cached_tokens == 0 or (second.cached_tokens is None and hit_delta == 0):
        return True, "reset"
    if second.cached_tokens is None and hit_delta is None:
        return None, "server reports neither cached_tokens nor a hit counter; cannot verify"
    return False, (
        f"after a reset the probe still showed cached_tokens={second.cached_tokens} hit delta={hit_delta}"
    )
