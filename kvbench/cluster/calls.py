"""Awaiting Ray actor calls from asyncio, with a deadline, and their failures in one line.

Every call a driver makes to a remote actor is bounded in time: a node can vanish, and a phase
must end anyway. `ObjectRef.future()` (a concurrent future, the same for a Ray client) bridges to
the running loop, uvloop included.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def call(ref: Any, timeout_s: float) -> Any:
    """The result of one actor call; TimeoutError past `timeout_s`; Ray's error when it failed."""
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)


async def settle(refs: list[Any], timeout_s: float) -> list[Any]:
    """Results of several calls, each a value or the exception it ended with (TimeoutError too)."""
    return await asyncio.gather(*(call(r, timeout_s) for r in refs), return_exceptions=True)


def is_lost(exc: BaseException) -> bool:
    """The actor (or its node) is gone, as opposed to a call that raised or was late."""
    from ray.exceptions import RayActorError  # ActorDiedError, ActorUnavailableError are kinds of it

    return isinstance(exc, RayActorError)


def one_line(exc: BaseException) -> str:
    """An actor failure as one line: the remote cause when there is one, not Ray's whole traceback."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = str(exc).strip()
    name = type(exc).__name__
    if not text:
        return name
    first = next(ln.strip() for ln in text.splitlines() if ln.strip())
    line = first if name in first else f"{name}: {first}"
    return line if len(line) <= 300 else line[:297] + "..."
