"""Background traffic ("noisy neighbour") generators, bound to a measured phase.

    noise_generator(cfg, phase=..., writer=..., origin_ns=...)  ->  NoiseBackend (async context
    manager) -> NoiseHandle

Kinds (the scenario's `noise.kind`), each a backend registered below:
    none     a no-op handle (active False)                                   backend.py
    tcp      N sender processes (`python -m kvbench.noise.sender ...`) stream zeros to one or
             more TCP sinks (`kvbench noise sink`, or the mock's fabric port)  tcp.py, sender.py
    iperf3   drives `iperf3 -c` against each server, parses its JSON          iperf3.py
    fio      storage contention with `fio --output-format=json`              fio.py

Every generator records what it achieved once a second as noise.jsonl rows (handle.py) and stops
when the phase ends, raises or is cancelled: no process or socket outlives the block
(process.py). A generator that never reaches its target rate says so in `summary()["warning"]`.
Hygiene: the sink binds 127.0.0.1 unless told otherwise (sink.py); a generator refuses to start
without an explicit target; every loop is bounded in time (max_duration_s).

The registry. A (kind, cluster) pair maps to its backend factory, `factory(cfg, NoiseContext) ->
NoiseBackend` (the interface is in backend.py: start / sample_bytes / stop). `cluster` says where
the generators run: "local" (child processes of this kvbench) or "ray" (the same generators in
actors on a Ray cluster's nodes, ray_backend.py): a module that registers its factory for the
kinds it can place, and a caller that passes cluster="ray". Built-in entries are
"module:attribute" strings imported on first use, for two reasons: listing the kinds
(noise_kinds(), from which the scenario's list of kinds can be derived) costs nothing, and this
package stays free of imports, because every tcp sender process imports it on its way to
kvbench.noise.sender and must start in milliseconds. So: no import here but inside functions, and
no `typing` at run time (TYPE_CHECKING below is the constant mypy understands). Adding a kind is
one module with its backend class, one register_noise_kind() line, and its config section in the
scenario's noise union.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from kvbench.noise.backend import NoiseBackend, NoiseContext, NoNoiseBackend
    from kvbench.noise.handle import NoiseHandle, RowWriter, format_rate
    from kvbench.noise.iperf3 import parse_bitrate
    from kvbench.noise.process import split_host_port
    from kvbench.noise.sink import TcpSink, tcp_sink

    NoiseFactory = Callable[[Any, NoiseContext], NoiseBackend]

LOCAL = "local"
_REGISTRY: dict[tuple[str, str], NoiseFactory | str] = {}  # (cluster, kind) -> factory


def register_noise_kind(
    kind: str, factory: NoiseFactory | str, *, cluster: str = LOCAL, replace: bool = False
) -> None:
    """Make `kind` available to noise_generator() on `cluster`.

    `factory` is called as factory(cfg, ctx) and returns a NoiseBackend; a "module:attribute"
    string is imported when the kind is first used. Registering a taken pair is a programming
    error unless `replace` is set.
    """
    if (cluster, kind) in _REGISTRY and not replace:
        raise ValueError(f"noise kind {kind!r} is already registered for cluster {cluster!r}")
    _REGISTRY[(cluster, kind)] = factory


def noise_kinds(cluster: str = LOCAL) -> tuple[str, ...]:
    """The noise kinds registered for `cluster`, in registration order (built-ins first)."""
    return tuple(kind for where, kind in _REGISTRY if where == cluster)


def noise_backend_factory(kind: str, cluster: str = LOCAL) -> NoiseFactory:
    """The factory registered for `kind` on `cluster`; UsageError (one line) when there is none."""
    entry = _REGISTRY.get((cluster, kind))
    if entry is None:
        from kvbench.errors import UsageError

        known = ", ".join(noise_kinds(cluster)) or "none registered"
        where = "" if cluster == LOCAL else f" on cluster {cluster!r}"
        raise UsageError(f"noise.kind: unknown noise kind {kind!r}{where} (known: {known})")
    if isinstance(entry, str):
        import importlib

        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _REGISTRY[(cluster, kind)] = entry
    return entry


def noise_generator(
    cfg: Any,
    *,
    phase: str,
    writer: RowWriter | None,
    origin_ns: int,
    default_targets: list[str] | None = None,
    cluster: str = LOCAL,
) -> NoiseBackend:
    """The backend for `cfg` (a scenario noise section, dispatched on `cfg.kind`) on `cluster`,
    to be entered (`async with ... as handle`) just before a measured phase.

    Raises UsageError (at construction, before anything starts) for a config that cannot run:
    no target, a missing program, a path that does not exist, an unknown kind.
    """
    from kvbench.noise.backend import NoiseContext

    ctx = NoiseContext(
        phase=phase, writer=writer, origin_ns=origin_ns, default_targets=tuple(default_targets or ())
    )
    return noise_backend_factory(cfg.kind, cluster)(cfg, ctx)


register_noise_kind("none", "kvbench.noise.backend:NoNoiseBackend")
register_noise_kind("tcp", "kvbench.noise.tcp:TcpNoiseBackend")
register_noise_kind("iperf3", "kvbench.noise.iperf3:Iperf3NoiseBackend")
register_noise_kind("fio", "kvbench.noise.fio:FioNoiseBackend")
# the same generators as Ray actors on a cluster's nodes (ray_backend.py; needs `kvbench[ray]`)
register_noise_kind("none", "kvbench.noise.backend:NoNoiseBackend", cluster="ray")
for _kind in ("tcp", "iperf3", "fio"):
    register_noise_kind(_kind, "kvbench.noise.ray_backend:RayNoiseBackend", cluster="ray")
del _kind

# The package's public names, imported from their modules only when asked for (see above).
_LAZY = {
    "NoiseBackend": "kvbench.noise.backend",
    "NoiseContext": "kvbench.noise.backend",
    "NoNoiseBackend": "kvbench.noise.backend",
    "NoiseHandle": "kvbench.noise.handle",
    "RowWriter": "kvbench.noise.handle",
    "format_rate": "kvbench.noise.handle",
    "parse_bitrate": "kvbench.noise.iperf3",
    "split_host_port": "kvbench.noise.process",
    "TcpSink": "kvbench.noise.sink",
    "tcp_sink": "kvbench.noise.sink",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvbench.noise' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "LOCAL",
    "NoNoiseBackend",
    "NoiseBackend",
    "NoiseContext",
    "NoiseHandle",
    "RowWriter",
    "TcpSink",
    "format_rate",
    "noise_backend_factory",
    "noise_generator",
    "noise_kinds",
    "parse_bitrate",
    "register_noise_kind",
    "split_host_port",
    "tcp_sink",
]
