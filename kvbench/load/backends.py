"""Where the workers of a phase run: the LoadBackend interface and its in-process implementation.

A backend takes a phase's work items (kvbench.load.schedule) and calls `issue(item,
scheduled_ns)` for each, keeping at most `load.max_in_flight` requests in flight and, for a
paced load, starting each one at its arrival time. What a request does and how its row is
recorded stays with the caller (kvbench.run.context.Run.issue), so a backend only decides
WHERE and WHEN requests start.

`local` is today's in-process asyncio workers. A remote backend (Ray actors, agents on other
hosts) is another implementation registered in BACKENDS: it will need the request spec apart
from its execution (prompt, label, salted text; then client.send on the remote side, rows
streamed back with each worker's clock offset measured at start) -- `issue` is the seam to
split when that lands.
"""

from __future__ import annotations

from typing import Protocol

from kvbench.load.schedule import Issue, WorkItem, run_closed_loop, run_open_loop
from kvbench.scenario import Load


class LoadBackend(Protocol):
    """Runs one phase's work items; returns when every issued request has finished."""

    name: str

    async def run(self, load: Load, items: list[WorkItem], issue: Issue) -> None: ...


class LocalBackend:
    """In-process asyncio workers: N closed-loop workers, or open-loop arrivals under a cap."""

    name = "local"

    async def run(self, load: Load, items: list[WorkItem], issue: Issue) -> None:
        if load.paced:
            await run_open_loop(items, load.max_in_flight, issue)
        else:
            await run_closed_loop(items, load.max_in_flight, issue)


BACKENDS: dict[str, type[LoadBackend]] = {"local": LocalBackend}


def load_backend(name: str = "local") -> LoadBackend:
    """A backend by name (only `local` today)."""
    return BACKENDS[name]()
