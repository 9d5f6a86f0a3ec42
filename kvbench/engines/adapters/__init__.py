"""Engine adapters: one module per engine, one registry.

    base.py       EngineAdapter: reset, counters, detection, tokenize style, extra body, tiers
    registry.py   REGISTRY, @register, get_adapter, engine_names, metric_prefixes, detect_from
    mock.py vllm.py sglang.py dynamo.py lmcache.py llamacpp.py generic.py   the built-in engines

Adding an engine is one module with an `@register`-ed EngineAdapter subclass, imported here
(or anywhere before the scenario is validated). The scenario's engine names, the CLI help,
the kept metric prefixes and detection all read the registry.
"""

from __future__ import annotations

from typing import Any

from kvbench.engines.adapters import (  # noqa: F401  (importing a module registers its adapter)
    dynamo,
    generic,
    llamacpp,
    lmcache,
    mock,
    sglang,
    vllm,
)
from kvbench.engines.adapters.base import (
    ControlHTTP,
    EngineAdapter,
    GaugeRef,
    TierCapacity,
    TierOperationFailed,
    TierUnsupported,
    TransferCounter,
    first_present_sum,
)
from kvbench.engines.adapters.registry import (
    FALLBACK,
    REGISTRY,
    detect_from,
    engine_names,
    get_adapter,
    metric_prefixes,
    register,
    unregister,
)

__all__ = [
    "FALLBACK",
    "REGISTRY",
    "ControlHTTP",
    "EngineAdapter",
    "GaugeRef",
    "TierCapacity",
    "TierOperationFailed",
    "TierUnsupported",
    "TransferCounter",
    "detect_engine",
    "detect_from",
    "engine_help",
    "engine_names",
    "first_present_sum",
    "get_adapter",
    "metric_prefixes",
    "register",
    "unregister",
]


def engine_help() -> str:
    """The `--engine` help text: every registered name, 'auto' first."""
    return ", ".join(("auto", *engine_names())) + "."


async def detect_engine(http: ControlHTTP) -> str:
    """Guess the engine from /v1/models owned_by, then /metrics names; the fallback if neither says."""
    import aiohttp

    models: Any = None
    metrics: str | None = None
    try:
        status, body = await http.request("GET", "/v1/models")
        if status == 200:
            models = body
    except (aiohttp.ClientError, TimeoutError):
        pass
    found = detect_from(models)
    if found is not None:
        return found
    try:
        status, text = await http.get_text("/metrics")
        if status == 200:
            metrics = text
    except (aiohttp.ClientError, TimeoutError):
        pass
    return detect_from(None, metrics) or FALLBACK
