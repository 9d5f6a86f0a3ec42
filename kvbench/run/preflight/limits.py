"""The client machine's own limits: open files checked before anything starts, and a request that
this machine (not the server) failed marked as such.

A run at 1,000 connections under the common default of 1,024 open files fails most of its requests
with EMFILE, which looked like `connect_error` against the server. So: the soft limit is raised
toward the hard one before the first phase; when even the hard limit is too low, one line says
`ulimit -n` and the numbers (exit 2). A failure the local kernel reports (out of descriptors,
buffers, memory or local ports) is its own error type, `client_limit`, never the server's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from dataclasses import dataclass
from typing import Any

from kvbench.errors import UsageError

CLIENT_LIMIT = "client_limit"
# errors the local kernel raises on its own account, whatever the server does
_LOCAL_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL)
_LOCAL_TEXTS = tuple(os.strerror(n) for n in _LOCAL_ERRNOS)
_ERRNO = re.compile(r"\[Errno (\d+)\]")
# What a run holds beside its connections, each named so the refusal can say the sum:
RUN_FILES = 12  # result files open at once (requests, metrics, telemetry, noise, turns or replay rows,
# the mock's ground truth and log pipes, a manifest being replaced)
CONTROL_FDS = 8  # the untimed control and scrape connections, the served /metrics, the event loop's own
PER_PROCESS = 3  # a child's pipes (a noise sender, a local load worker)
MARGIN = 16  # what nothing above names (a resolver's socket, a plot's font file): stated, not guessed


def _in_use() -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/fd"))
    return 16


@dataclass(frozen=True)
class FdBudget:
    """The descriptors this process will hold at once during a run, by what holds them."""

    connections: int  # timed requests in flight from THIS process (none when load workers send)
    exporters: int = 0
    children: int = 0  # noise senders and local load workers: each holds pipes here
    worker_connections: int = 0  # the most connections one load worker holds (its own process)

    def parts(self, in_use: int) -> list[tuple[str, int]]:
        pipes = PER_PROCESS * self.children
        return [
            (f"{self.connections:,} connections", self.connections),
            (f"{in_use} open now", in_use),
            (f"{RUN_FILES} result files", RUN_FILES),
            (f"{CONTROL_FDS + self.exporters} control and scrape connections", CONTROL_FDS + self.exporters),
            (f"{pipes} pipes to {self.children} child processes", pipes),
            (f"a margin of {MARGIN}", MARGIN),
        ]

    def need(self, in_use: int) -> int:
        here = sum(n for _, n in self.parts(in_use))
        # a load worker inherits the limit: its own connections, files and control calls must fit too
        worker = self.worker_connections + RUN_FILES + CONTROL_FDS + MARGIN if self.worker_connections else 0
        return max(here, worker)


def fd_budget(scn: Any) -> FdBudget:
    """What a scenario's run will hold open, from its load, noise and telemetry sections."""
    connections = max(int(scn.load.max_in_flight), int(scn.test.max_in_flight or 0))
    workers = int(scn.load.workers or 0)
    noisy = bool(scn.test.noisy_phases) and scn.noise.kind != "none"
    senders = int(getattr(scn.noise, "clients", 1)) if noisy else 0
    exporters = len(scn.telemetry.exporters)
    if workers:
        per_worker = -(-connections // workers)
        return FdBudget(0, exporters, workers + senders, per_worker)
    return FdBudget(connections, exporters, senders)


def ensure_open_files(budget: FdBudget | int) -> tuple[int, int]:
    """Make room for what the run holds: raise the soft RLIMIT_NOFILE toward the hard one when
    needed; UsageError naming `ulimit -n` and the count when even the hard limit cannot hold it.
    Returns (soft, hard) after. An int is that many connections and nothing else."""
    try:
        import resource
    except ModuleNotFoundError:  # not a POSIX system: nothing to check
        return (0, 0)
    if isinstance(budget, int):
        budget = FdBudget(budget)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = _in_use()
    need = budget.need(in_use)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= need:
        return soft, hard
    target = need if hard == unlimited else min(hard, need)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < need:
        shown = "unlimited" if hard == unlimited else str(hard)
        held = budget.connections or budget.worker_connections
        what = " + ".join(label for label, n in budget.parts(in_use) if n)
        raise UsageError(
            f"open files: this run opens up to {held:,} connections and needs {need:,} file "
            f"descriptors ({what}), but this process may open {soft} (hard limit {shown}); raise it "
            f"with `ulimit -n {need}` or lower load.concurrency"
        )
    return soft, hard


def is_client_limit(error_type: str | None, message: str | None) -> bool:
    """A connect failure the local kernel raised (EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL)."""
    if error_type != "connect_error" or not message:
        return False
    found = _ERRNO.search(message)
    if found is not None:
        return int(found.group(1)) in _LOCAL_ERRNOS
    return any(text in message for text in _LOCAL_TEXTS)


def client_limit_message(message: str) -> str:
    return f"this machine's limit, not the server: {message} (see `ulimit -n`, load.concurrency)"


def check_cluster_room(scn: Any, session: Any) -> None:
    """The Ray cluster can hold the run's load workers and noise clients at once (exit 2 if not),
    checked before the first phase."""
    from kvbench.cluster import require_ray
    from kvbench.cluster.placement import alive_nodes, check_room

    noisy = bool(scn.test.noisy_phases) and scn.noise.kind != "none"
    problem = check_room(
        alive_nodes(require_ray("a run on a Ray cluster")),
        load_workers=int(scn.load.workers or 0),
        cpus_per_load_worker=session.limits.cpus_per_load_worker,
        noise_clients=int(getattr(scn.noise, "clients", 1)) if noisy else 0,
        noise_placement=getattr(scn.noise, "placement", "spread"),
        cpus_per_noise_client=session.limits.cpus_per_noise_client,
        driver_node_id=session.driver_node_id,
    )
    if problem is not None:
        raise UsageError(problem)
