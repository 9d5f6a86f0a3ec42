"""Keep the garbage collector out of the timed loop: freeze the heap a run has built before it sends.

CPython's full collection walks every tracked object. A kvbench process (aiohttp, pydantic, numpy,
the scenario, the prompts) holds ~55k of them before its first request, and a Ray load worker as
many (Ray, gRPC, protobuf): a full pass then stalls the event loop for 10-30 ms on a small machine,
and the requests whose bytes arrive meanwhile are read late (their first token's stamp moves to a
later token's arrival when the kernel merges the queued segments). What exists before the phases
lives for the whole run, so it is moved out of the collector's sight (gc.freeze); what the run
allocates later is collected as usual.
"""

from __future__ import annotations

import gc


def freeze_heap() -> int:
    """Collect once, then freeze what survives; returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
