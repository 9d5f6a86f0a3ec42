"""Timed transports and the one rule that picks one: `target.transport` (auto | http1 | aiohttp).

auto: kvbench's own HTTP/1.1 for http://, aiohttp for https://. The environment variable
KVBENCH_CLIENT_HTTP=aiohttp is still honoured under auto (deprecated: use target.transport).
"""

from __future__ import annotations

import os

from kvbench.client.transport.base import (
    BadResponse,
    ConnectFailed,
    ConnectionLost,
    ResponseSink,
    TimedRequest,
    TimedTransport,
    TransportError,
)

TRANSPORTS = ("auto", "http1", "aiohttp")

__all__ = [
    "TRANSPORTS",
    "BadResponse",
    "ConnectFailed",
    "ConnectionLost",
    "ResponseSink",
    "TimedRequest",
    "TimedTransport",
    "TransportError",
    "choose",
    "make_transport",
]


def choose(kind: str, scheme: str) -> str:
    """The transport for a URL scheme; ValueError when the choice cannot carry it."""
    if kind not in TRANSPORTS:
        raise ValueError(f"target.transport: {kind!r} is not one of {', '.join(TRANSPORTS)}")
    if kind == "auto":
        if os.environ.get("KVBENCH_CLIENT_HTTP") == "aiohttp":  # deprecated alias
            return "aiohttp"
        return "http1" if scheme == "http" else "aiohttp"
    if kind == "http1" and scheme != "http":
        raise ValueError("target.transport: http1 carries http:// only; use auto or aiohttp for https://")
    return kind


def make_transport(name: str, limit: int, connect_timeout_s: float) -> TimedTransport:
    if name == "http1":
        from kvbench.client.transport.http1 import Http1Transport

        return Http1Transport(limit, connect_timeout_s)
    from kvbench.client.transport.aiohttp import AiohttpTransport

    return AiohttpTransport(limit, connect_timeout_s)
