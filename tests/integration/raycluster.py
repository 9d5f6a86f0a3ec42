"""A real Ray cluster for tests: a head and two worker nodes, each its own raylet, on this machine.

Ray's own multi-node test harness (`ray.cluster_utils.Cluster`), not a mock: actors placed on a
node run in that node's worker processes. Kept small for a 2-core box: logical CPUs only (no real
reservation), the smallest object store Ray accepts, no dashboard. Start it once per module
with `ray_test_cluster()`. Not `kill_child_processes_on_worker_exit_with_raylet_subreaper`: it makes
every subprocess exit status read 0 in the driver (see kvbench.cluster.session).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import pytest

OBJECT_STORE = 80 * 1024 * 1024


@contextlib.contextmanager
def ray_test_cluster(workers: int = 2, cpus: int = 2, client_server: bool = False):
    """Yield (cluster, ray) with this process connected as the driver; everything stops after.
    `client_server`: the head also serves Ray clients, at `cluster.client_address` (ray://...)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'kvbench[ray]'")
    from ray.cluster_utils import Cluster

    from kvbench.cluster import session

    head: dict = {"num_cpus": cpus, "object_store_memory": OBJECT_STORE, "include_dashboard": False}
    if client_server:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            head["ray_client_server_port"] = s.getsockname()[1]
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.client_address = f"ray://127.0.0.1:{head.get('ray_client_server_port')}"
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=cpus, object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address,
            namespace="kvbench-test",
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        yield cluster, ray
    finally:
        session.disconnect()
        with contextlib.suppress(Exception):
            ray.shutdown()
        cluster.shutdown()


def cmdlines(needle: str) -> list[str]:
    """Command lines on this machine that contain `needle` (every test-cluster node is here)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            with contextlib.suppress(OSError):
                line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                if needle in line:
                    out.append(line)
    return out


def actor_states(ray, actors) -> list[str]:
    """The GCS's view of each actor (ALIVE, DEAD, ...), without the dashboard's state API."""
    from ray._private import state

    table = state.actors()
    return [table.get(a._actor_id.hex(), {}).get("State", "UNKNOWN") for a in actors]


def kvbench_cli(*args: str, address: str, wait: bool = True, timeout: float = 300):
    """`python -m kvbench ARGS` as a driver of the test cluster (RAY_ADDRESS), like a user's run."""
    import subprocess
    import sys

    env = {**os.environ, "RAY_ADDRESS": address} if address else dict(os.environ)
    cmd = [sys.executable, "-m", "kvbench", *args]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def alive_actors(class_name: str) -> list[dict]:
    """The cluster's ALIVE actors of one class (this process must be connected to the cluster)."""
    from ray._private import state

    return [a for a in state.actors().values() if a["ActorClassName"] == class_name and a["State"] == "ALIVE"]


def read_jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def children(parents: set[int]) -> set[int]:
    """Live processes whose parent is one of `parents` (e.g. the senders of noise actors)."""
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                if fields[0] != "Z" and int(fields[1]) in parents:
                    out.add(int(pid))
    return out
