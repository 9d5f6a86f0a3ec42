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
from typing import Any

from kvbench.errors import UsageError

CLIENT_LIMIT = "client_limit"
# errors the local kernel raises on its own account, whatever the server does
_LOCAL_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL)
_LOCAL_TEXTS = tuple(os.strerror(n) for n in _LOCAL_ERRNOS)
_ERRNO = re.compile(r"\[Errno (\d+)\]")
# descriptors a run holds beside its connections: result files, the mock's and noise senders' pipes,
# the control and metrics connections, the event loop's own
SPARE_FDS = 64


def _in_use() -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/fd"))
    return 16


def ensure_open_files(connections: int, spare: int = SPARE_FDS) -> tuple[int, int]:
    """Make room for `connections` sockets: raise the soft RLIMIT_NOFILE toward the hard one when
    needed; UsageError naming `ulimit -n` when the hard limit is too low. Returns (soft, hard) after."""
    try:
        import resource
    except ModuleNotFoundError:  # not a POSIX system: nothing to check
        return (0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = connections + _in_use() + spare
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= need:
        return soft, hard
    target = need if hard == unlimited else min(hard, need)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < need:
        shown = "unlimited" if hard == unlimited else str(hard)
        raise UsageError(
            f"open files: this run opens up to {connections} connections and needs about {need} file "
            f"descriptors, but this process may open {soft} (hard limit {shown}); raise it with "
            f"`ulimit -n {need}` or lower load.concurrency"
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
