"""Where kvbench's generators run when one machine is not enough: a Ray cluster.

The published noisy-neighbour test used four client machines of noise; one kvbench process caps the
noise at one host's NIC and the load at one client. With `cluster: ray`, noise clients (and load
workers) are Ray actors placed on the cluster's nodes. This package holds what every remote backend
shares, and nothing about noise or load itself:

    session.py    connect to Ray (an address, RAY_ADDRESS, a cluster on this node, or a local Ray
                  started for the run), ship this kvbench to the nodes, disconnect
    placement.py  the alive nodes and a pure `place()`: spread (one per node while nodes last) or pack
    clock.py      a remote process's clock offset to the driver (round trips, midpoint)
    calls.py      awaiting actor calls with a deadline, and one-line messages for their failures

The backends live with their area: `kvbench.noise.ray_backend` (noise clients) and
`kvbench.load.ray_backend` (load workers); this package imports nothing of kvbench but errors.
Ray is an optional dependency (`pip install 'kvbench[ray]'`): this module imports nothing, and
`require_ray()` turns its absence into a one-line UsageError (exit 2).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

RAY = "ray"
INSTALL_HINT = "pip install 'kvbench[ray]'"


def require_ray(what: str = "the Ray backend") -> ModuleType:
    """The `ray` module, or a one-line UsageError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        from kvbench.errors import UsageError

        raise UsageError(f"{what} needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


def ray_available() -> bool:
    """Whether Ray can be imported here (tests skip without it; the CLI says how to install it)."""
    import importlib.util

    return importlib.util.find_spec("ray") is not None


__all__ = ["INSTALL_HINT", "RAY", "ray_available", "require_ray"]
