"""Where the workers of a phase run: the LoadBackend interface and its in-process implementation.

A backend takes a phase's work items (kvbench.load.schedule) and calls `issue(item,
scheduled_ns)` for each, keeping at most `load.max_in_flight` requests in flight and, for a
paced load, starting each one at its arrival time. What a request does and how its row is
recorded stays with the caller (kvbench.run.context.Run.issue), so a backend only decides
WHERE and WHEN requests start.

`local` is today's in-process asyncio workers. `ray` (ray_backend.py, `load.workers: K` with
`cluster.backend: ray`) sends from K actors on a Ray cluster; `processes` (local_workers.py,
`load.workers: K` without a cluster) from K worker processes on this machine, through the same
contract and worker code. Both need the request apart from its execution, so their `issue` is a
RemotePhase (prepare / record, kvbench.run.remote) rather than a coroutine; `remote = True` tells
the phase to pass one. A backend with `aclose()` keeps state
across phases (the ray workers) and is closed at the end of the run.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kvbench.load.schedule import Issue, WorkItem, run_closed_loop, run_open_loop
from kvbench.scenario import Load


class LoadBackend(Protocol):
    """Runs one phase's work items; returns when every issued request has finished."""

    name: str

    async def run(self, load: Load, items: list[WorkItem], issue: Issue) -> None: ...


@runtime_checkable
class RemoteLoadBackend(Protocol):
    """A backend that sends elsewhere: `run` takes a RemotePhase; `ready` brings its workers up
    before the phase's clock starts; `phases` holds what each phase's manifest entry records,
    including the span the workers sent in (started_ns / ended_ns on the driver's timeline)."""

    name: str
    remote: bool
    phases: list[dict[str, Any]]

    async def ready(self, phase: Any, origin_ns: int) -> None: ...

    async def run(self, load: Load, items: list[WorkItem], issue: Any) -> None: ...


class LocalBackend:
    """In-process asyncio workers: N closed-loop workers, or open-loop arrivals under a cap."""

    name = "local"

    async def run(self, load: Load, items: list[WorkItem], issue: Issue) -> None:
        if load.paced:
            await run_open_loop(items, load.max_in_flight, issue)
        else:
            await run_closed_loop(items, load.max_in_flight, issue)


BACKENDS: dict[str, type[LoadBackend]] = {"local": LocalBackend}


def load_backend(name: str = "local", **options: Any) -> LoadBackend:
    """A backend by name: `local`, `processes` (options: workers, pin, silence_s), or `ray` (options: workers,
    placement, silence_s; needs `kvbench[ray]`). `ray` asked for while this process has no Ray session (the
    scenario has no cluster: kvbench.run.remote.connect_cluster connects one first when it has)
    means `load.workers: K` on this machine: the `processes` backend."""
    if name == "ray" and not _ray_connected():
        name = "processes"
    if name == "processes":
        from kvbench.load.local_workers import LocalWorkersBackend

        return LocalWorkersBackend(
            **{k: v for k, v in options.items() if k in ("workers", "pin", "silence_s")}
        )
    if name == "ray":
        from kvbench.load.ray_backend import RayLoadBackend

        return RayLoadBackend(**options)
    return BACKENDS[name]()


def _ray_connected() -> bool:
    """A Ray session is open in this process (without importing Ray when none is)."""
    import sys

    session = sys.modules.get("kvbench.cluster.session")
    return session is not None and getattr(session, "_SESSION", None) is not None
