"""One Ray connection per run: find the cluster, ship this kvbench to it, say what was used.

Addresses, as a user writes them (`cluster.address`, `--cluster ray[://HOST:PORT]`):

    auto            RAY_ADDRESS when set; else the cluster this machine belongs to (Ray's own
                    `address="auto"`: you run kvbench on a cluster node); else a local Ray started
                    for this run (and stopped with it): one machine, but the same code path
    ray://HOST:PORT the Ray client server of a remote cluster (KubeRay exposes it on 10001)
    HOST:PORT       a cluster's GCS address, for a driver that runs on one of its nodes

The nodes need Python and the same Ray version as here, nothing of kvbench: the kvbench package
this driver runs is shipped with the job (`runtime_env.py_modules`), so every actor runs the exact
code that wrote the run directory. The generators it runs need only the standard library (tcp
senders) or their own program on the node (iperf3, fio).

Stray processes: kvbench stops every generator itself (the local way, on its node), then kills
the actors; Ray (>= 2.x default `kill_child_processes_on_worker_exit`) kills the children of a
killed actor too, and a tcp sender also stops when its parent's pipe closes. Ray's stronger
`..._with_raylet_subreaper` setting is NOT used: it sets SIGCHLD to ignored in the driver and the
workers, after which every subprocess exit status reads 0 (or 255), which kvbench relies on.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.cluster import require_ray
from kvbench.errors import UsageError

NAMESPACE = "kvbench"
AUTO = "auto"
# what a job ships of kvbench: the package, without caches and bulky test-only files
_SHIP_EXCLUDES = ["__pycache__", "*.pyc", "*.egg-info"]


@dataclass(frozen=True)
class ClusterLimits:
    """What each remote actor asks of its node (the scenario's cluster section)."""

    cpus_per_noise_client: float = 1.0  # Ray CPUs reserved per noise actor (its senders use real ones)
    cpus_per_load_worker: float = 1.0  # Ray CPUs reserved per load worker
    start_timeout_s: float = 60.0  # an actor not running by then is recorded as failed to start

    def record(self) -> dict[str, Any]:
        return {
            "cpus_per_noise_client": self.cpus_per_noise_client,
            "cpus_per_load_worker": self.cpus_per_load_worker,
            "start_timeout_s": self.start_timeout_s,
        }


@dataclass
class RaySession:
    """The Ray connection of this process, as the manifest records it."""

    address: str  # as asked: auto, ray://..., host:port
    mode: str  # started (a local Ray for this run) | connected (a cluster) | client (ray://) | existing
    ray_version: str
    driver_node_id: str | None  # the node this driver runs on (None: a Ray client, off the cluster)
    driver_ip: str | None
    shipped_code: bool
    limits: ClusterLimits = field(default_factory=ClusterLimits)
    load_nodes: set[str] = field(default_factory=set)  # nodes running load workers: noise avoids them
    owned: bool = field(default=False, repr=False)  # ours to shut down

    def avoid(self, *, noise: bool) -> set[str]:
        """Nodes a placement puts last: the driver's, and for noise the load workers' too."""
        nodes = {self.driver_node_id} if self.driver_node_id else set()
        return nodes | self.load_nodes if noise else nodes

    def record(self) -> dict[str, Any]:
        """The manifest's view of the connection."""
        return {
            "backend": "ray",
            "address": self.address,
            "mode": self.mode,
            "ray_version": self.ray_version,
            "driver_node_id": self.driver_node_id,
            "driver_ip": self.driver_ip,
            "shipped_code": self.shipped_code,
            "limits": self.limits.record(),
        }


_SESSION: RaySession | None = None


def is_client_address(address: str) -> bool:
    return address.startswith("ray://")


def kvbench_package_dir() -> Path:
    return Path(__file__).resolve().parents[1]


def connect(
    address: str = AUTO,
    *,
    ship_code: bool = True,
    num_cpus: int | None = None,
    limits: ClusterLimits | None = None,
) -> RaySession:
    """Connect this process to Ray (once; later calls return the same session, with `limits` if given)."""
    global _SESSION
    # a Ray client's gRPC logs "skipping fork() handlers" whenever kvbench starts a child: not news
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    ray = require_ray("cluster.backend: ray")
    if _SESSION is not None and ray.is_initialized():
        if limits is not None:
            _SESSION.limits = limits
        return _SESSION
    if ray.is_initialized():  # someone (a test, an embedding program) connected already: use it
        _SESSION = _describe(ray, address, "existing", shipped=False, owned=False)
        _SESSION.limits = limits or ClusterLimits()
        return _SESSION
    runtime_env = (
        {"py_modules": [str(kvbench_package_dir())], "excludes": _SHIP_EXCLUDES} if ship_code else None
    )
    quiet: dict[str, Any] = {"namespace": NAMESPACE, "logging_level": logging.WARNING}
    target = address
    if address == AUTO:
        target = os.environ.get("RAY_ADDRESS", "").strip() or AUTO
    try:
        if is_client_address(target):
            ray.init(target, runtime_env=runtime_env, **quiet)
            mode = "client"
        elif target == AUTO:
            mode = _auto(ray, runtime_env, quiet, num_cpus)
        else:
            ray.init(target, runtime_env=runtime_env, log_to_driver=False, **quiet)
            mode = "connected"
    except UsageError:
        raise
    except Exception as exc:  # ConnectionError, version mismatch, a refused client server...
        with contextlib.suppress(Exception):
            ray.shutdown()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"cluster.address: cannot connect to Ray at {target}: {first}{_auth_hint(target)}"
        ) from exc
    _SESSION = _describe(ray, address, mode, shipped=ship_code and mode != "started", owned=True)
    _SESSION.limits = limits or ClusterLimits()
    return _SESSION


def _auth_hint(target: str) -> str:
    """Why a reachable cluster may refuse: `ray start` turns on token authentication when a token
    exists, and Ray sends one to a cluster named by address (or RAY_ADDRESS) only when asked to."""
    if os.environ.get("RAY_AUTH_MODE") or target == AUTO:
        return ""
    return (
        " (if the cluster uses Ray's token authentication, set RAY_AUTH_MODE=token here; the token "
        "is read from RAY_AUTH_TOKEN or ~/.ray/auth_token, as printed by `ray get-auth-token`)"
    )


def _auto(ray: Any, runtime_env: dict[str, Any] | None, quiet: dict[str, Any], num_cpus: int | None) -> str:
    """A cluster this machine belongs to, else a local Ray started for this run."""
    try:
        ray.init(AUTO, runtime_env=runtime_env, log_to_driver=False, **quiet)
        return "connected"
    except ConnectionError:
        pass
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, **quiet)
    return "started"


def _describe(ray: Any, address: str, mode: str, *, shipped: bool, owned: bool) -> RaySession:
    client = mode == "client" or _is_client(ray)
    node_id = ip = None
    if not client:
        node_id = ray.get_runtime_context().get_node_id()
        ip = ray.util.get_node_ip_address()
    return RaySession(
        address=address,
        mode="client" if client else mode,
        ray_version=str(ray.__version__),
        driver_node_id=node_id,
        driver_ip=ip,
        shipped_code=shipped,
        owned=owned,
    )


def _is_client(ray: Any) -> bool:
    with contextlib.suppress(Exception):
        from ray.util.client import ray as client_ray

        return bool(client_ray.is_connected())
    return False


def current(address: str = AUTO) -> RaySession:
    """The session of this process, connecting (address `auto`) if nobody has."""
    return connect(address)


def disconnect() -> None:
    """Leave Ray if we joined it (a local Ray we started stops with it); keep a caller's connection."""
    global _SESSION
    session, _SESSION = _SESSION, None
    if session is None or not session.owned:
        return
    ray = require_ray()
    with contextlib.suppress(Exception):
        ray.shutdown()
