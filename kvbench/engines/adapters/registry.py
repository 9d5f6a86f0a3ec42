"""The one registry of engine adapters: name -> adapter instance, filled by `@register`.

Built-in adapters register when `kvbench.engines.adapters` is imported; an adapter defined
anywhere else (a plug-in, a test) registers the same way, at its own import, and from then on
is a valid `target.engine`, appears in the CLI help, is asked during detection and has its
metric prefixes kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from kvbench.engines.adapters.base import EngineAdapter

REGISTRY: dict[str, EngineAdapter] = {}

A = TypeVar("A", bound=type[EngineAdapter])

FALLBACK = "generic"  # the adapter of a server nothing else claims


def register(cls: A) -> A:
    """Class decorator: register one instance of `cls` under `cls.name`."""
    if not cls.name or not cls.name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"engine adapter {cls.__name__}: name must be a short word, got {cls.name!r}")
    if cls.name == "auto":
        raise ValueError("'auto' is not an engine name: it means 'detect the engine'")
    REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Remove an adapter (tests that register a temporary one)."""
    if name == FALLBACK:
        raise ValueError(f"the {FALLBACK} adapter cannot be removed")
    REGISTRY.pop(name, None)


def get_adapter(name: str) -> EngineAdapter:
    """The adapter of `name`; the generic one for a name nobody registered."""
    return REGISTRY.get(name) or REGISTRY[FALLBACK]


def engine_names() -> tuple[str, ...]:
    """Registered names in detection order (the generic fallback last)."""
    return tuple(a.name for a in detect_order())


def metric_prefixes() -> tuple[str, ...]:
    """Every adapter's kept /metrics prefixes, without repeats."""
    return tuple(dict.fromkeys(p for a in REGISTRY.values() for p in a.metric_prefixes))


def detect_order() -> list[EngineAdapter]:
    return sorted(REGISTRY.values(), key=lambda a: a.detect_order)


def detect_from(models: Any = None, metrics_text: str | None = None) -> str | None:
    """The engine named by a /v1/models answer or, failing that, a /metrics text; None if neither.

    Pure: the contract test runs it on sample answers. /v1/models `owned_by` is asked first
    (it names the serving program); metric names second (a proxy may rewrite owned_by).
    """
    ordered = detect_order()
    if isinstance(models, Mapping):
        data = models.get("data")
        owners = sorted(
            {str(m.get("owned_by", "")).lower() for m in data if isinstance(m, Mapping)}
            if isinstance(data, list)
            else set()
        )
        for owner in owners:
            for adapter in ordered:
                if owner and adapter.owns(owner):
                    return adapter.name
    if metrics_text:
        for adapter in ordered:
            if adapter.speaks(metrics_text):
                return adapter.name
    return None
