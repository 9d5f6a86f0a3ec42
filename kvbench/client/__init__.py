"""The timed client: one request in, one RequestRecord out (StreamingClient over a TimedTransport).

Modules: body (ClientConfig, build_body), record (RequestRecord), delivery (whether TTFT was the
server's or a proxy's delivery), stream (what a response means), sse (the pure parser), detail
(error-body messages), url (base URL, credentials, redaction), control (untimed JSON calls and
the run's aiohttp session), streaming (the client), transport/ (the timed transports behind one
interface, kvbench.client.transport.base).
Names are imported on first use, so importing a submodule stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvbench.client.body import ClientConfig, build_body
    from kvbench.client.control import ControlClient, make_session
    from kvbench.client.delivery import burst_warning, delivery_warning, is_burst
    from kvbench.client.record import RequestRecord
    from kvbench.client.stream import ResponseStream
    from kvbench.client.streaming import StreamingClient

_WHERE = {
    "ClientConfig": "body",
    "build_body": "body",
    "ControlClient": "control",
    "make_session": "control",
    "RequestRecord": "record",
    "burst_warning": "delivery",
    "delivery_warning": "delivery",
    "is_burst": "delivery",
    "ResponseStream": "stream",
    "StreamingClient": "streaming",
}
__all__ = [
    "ClientConfig",
    "ControlClient",
    "RequestRecord",
    "ResponseStream",
    "StreamingClient",
    "build_body",
    "burst_warning",
    "delivery_warning",
    "is_burst",
    "make_session",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kvbench.client' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kvbench.client.{module}"), name)
