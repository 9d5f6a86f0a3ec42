"""Background traffic ("noisy neighbour") generators, bound to a measured phase.

    noise_generator(cfg, phase=..., writer=..., origin_ns=...)  ->  async context manager -> NoiseHandle

    NoNoise      a no-op handle (active False)
    TcpNoise     built in: N sender *processes* (`python -m kvbench.noise send ...`) stream zeros to
                 one or more TCP sinks (`kvbench noise sink`, or the mock's fabric port)
    Iperf3Noise  drives `iperf3 -c` against each server, parses its JSON
    FioNoise     storage contention with `fio --output-format=json --status-interval=1`

Every generator records what it achieved once a second as noise.jsonl rows
(`t_ns`, `phase`, `client`, `bytes`, `bytes_per_s`, plus a `client: "total"` row),
and stops in `finally`, whether the phase ends, raises or is cancelled: senders get
EOF on stdin, then SIGTERM, then SIGKILL; no process or socket outlives the block.
A generator that never reaches its target rate says so in `summary()["warning"]`.

Hygiene: the sink binds 127.0.0.1 unless told otherwise; a generator refuses to start
without an explicit target; every loop is bounded in time (max_duration_s).

This module is also the sender's entry point (`python -m kvbench.noise send HOST PORT ...`): the
sender's code comes first and needs only the stdlib; `-m` stops at the `__main__` guard before the
generators' imports (asyncio, json, ...), so a sender starts in ~20 ms instead of ~150 ms.
"""

from __future__ import annotations

# The sender process (`python -m kvbench.noise send ...`) runs only this first part: it stops at the
# `__main__` guard below, before asyncio (whose ssl import costs ~0.1 s per process) is imported.
import os
import selectors
import signal
import socket
import sys
import time

SENDER_REPORT_S = 0.05  # a sender reports its byte count this often


# --- the sender process (lean: stdlib only) ---------------------------------------------------------------


def _send_main(host: str, port: int, chunk_bytes: int, rate: float, max_duration_s: float) -> int:
    """Stream zeros to host:port until stdin closes (or says anything more), max_duration_s passes or the
    sink goes away. Prints `connected`, waits for `go` on stdin, then prints its cumulative byte count
    every SENDER_REPORT_S and at the end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which stops us
    out = sys.stdout
    deadline = time.monotonic() + max_duration_s
    try:
        sock = socket.create_connection((host, port), timeout=5.0)
    except OSError as exc:
        print(f"error {exc.strerror or exc}", file=out, flush=True)
        return 1
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    sent = 0
    rc = 0
    try:
        sock.settimeout(0.2)
        print("connected", file=out, flush=True)
        # wait for "go" (all senders connected); EOF instead means stop before starting
        if (
            not sel.select(max(0.0, deadline - time.monotonic()))
            or os.read(sys.stdin.fileno(), 16) != b"go\n"
        ):
            print(0, file=out, flush=True)
            return 0
        size = chunk_bytes if rate <= 0 else max(4096, min(chunk_bytes, int(rate * SENDER_REPORT_S)))
        view = memoryview(bytes(size))
        burst = 2.0 * size  # absorbs sleep overshoot on a loaded machine
        tokens = float(size)
        t_last = last_report = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            if now - last_report >= SENDER_REPORT_S:
                print(sent, file=out, flush=True)
                last_report = now
                if sel.select(0):  # EOF or a line on stdin: stop
                    break
            if rate > 0:
                tokens = min(burst, tokens + (now - t_last) * rate)
                t_last = now
                if tokens < size:
                    time.sleep(min(SENDER_REPORT_S, (size - tokens) / rate))
                    continue
            try:
                n = sock.send(view)
            except TimeoutError:
                continue
            except OSError as exc:
                print(f"error the sink closed the connection: {exc.strerror or exc}", file=out, flush=True)
                rc = 1
                break
            sent += n
            tokens -= n
        print(sent, file=out, flush=True)
    except BrokenPipeError:  # the parent went away: nothing to report to
        rc = 1
    finally:
        sel.close()
        sock.close()
    return rc


# --- `python -m kvbench.noise send HOST PORT ...` ---------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kvbench.noise", description="kvbench noise sender process")
    sub = ap.add_subparsers(dest="cmd", required=True)
    send = sub.add_parser("send", help="stream zeros to a TCP sink (used by the tcp noise generator)")
    send.add_argument("host")
    send.add_argument("port", type=int)
    send.add_argument("--chunk-bytes", type=int, default=262_144)
    send.add_argument("--rate", type=float, default=0.0, help="bytes/s for this sender; 0 = unlimited")
    send.add_argument("--max-duration", type=float, default=3600.0)
    args = ap.parse_args(argv)
    if args.chunk_bytes <= 0 or args.max_duration <= 0:
        ap.error("--chunk-bytes and --max-duration must be positive")
    return _send_main(args.host, args.port, args.chunk_bytes, args.rate, args.max_duration)


if __name__ == "__main__":
    sys.exit(main())

# --- everything else: the generators, the sink (the parent process) ---------------------------------------


import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
from collections.abc import AsyncIterator, Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from kvbench.errors import UsageError  # noqa: E402

if TYPE_CHECKING:
    from kvbench.results import JsonlWriter
    from kvbench.scenario import FioNoise, Iperf3Noise, NoNoise, TcpNoise

    NoiseConfig = NoNoise | TcpNoise | Iperf3Noise | FioNoise

REACHED_FRACTION = 0.9  # mean >= 90% of the target counts as reaching it
SAMPLE_INTERVAL_S = 1.0
SENDER_CONNECT_TIMEOUT_S = 15.0  # spawn + import + connect, on a loaded 2-core box
STOP_GRACE_S = 2.0  # after EOF / SIGINT, before SIGTERM
KILL_GRACE_S = 1.0  # after SIGTERM, before SIGKILL
FIO_STOP_GRACE_S = 10.0  # fio unlinks its files and prints its last JSON on SIGINT
EARLY_FAIL_S = 0.3  # watch this long for a tool that fails at once (bad option, refused)
MAX_CHILD_OUTPUT = 64 * 1024 * 1024  # bound on what we buffer from a tool's stdout
SINK_MAX_CONNECTIONS = 256
SINK_BUFFER_BYTES = 1 << 20

# --- the handle and the per-second recorder ---------------------------------------------------------------


@dataclass
class NoiseHandle:
    """What the runner sees of a running generator; `summary()` goes into the manifest."""

    kind: str
    config: dict[str, Any]
    phase: str
    origin_ns: int
    writer: JsonlWriter | None = None
    target_bytes_per_s: float | None = None
    active: bool = False
    started_ns: int | None = None
    stopped_ns: int | None = None
    clients: list[dict[str, Any]] = field(default_factory=list)
    total_bytes: int = 0
    duration_s: float | None = None  # set by a generator that knows better than the wall clock
    problems: list[str] = field(default_factory=list)
    peak_bytes_per_s: float = 0.0
    intervals: int = 0
    live_bytes: Callable[[], int | None] | None = None  # bytes so far, while running (None: unknown)

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    def record(self, t_ns: int, dt_s: float, per_client: dict[str, int], *, full: bool = True) -> None:
        """One interval: a row per client and a total row. `full` intervals count towards the peak."""
        if dt_s <= 0:
            return
        total = 0
        for client, nbytes in per_client.items():
            total += nbytes
            self._row(t_ns, client, nbytes, dt_s)
        self._row(t_ns, "total", total, dt_s)
        self.intervals += 1
        if full:
            self.peak_bytes_per_s = max(self.peak_bytes_per_s, total / dt_s)

    def _row(self, t_ns: int, client: str, nbytes: int, dt_s: float) -> None:
        if self.writer is None:
            return
        self.writer.write(
            {
                "t_ns": int(t_ns),
                "phase": self.phase,
                "client": client,
                "bytes": int(nbytes),
                "bytes_per_s": round(nbytes / dt_s, 1),
            }
        )

    def summary(self) -> dict[str, Any]:
        """Best after the `async with` block; taken inside it, it covers the noise so far."""
        warnings = list(self.problems)
        total: int | None = self.total_bytes
        duration = self.duration_s
        if self.started_ns is not None and self.stopped_ns is None:  # still running
            duration = (self.now_ns() - self.started_ns) / 1e9
            total = self.live_bytes() if self.live_bytes is not None else None
            if total is None:
                warnings.append(
                    f"{self.kind} reports its totals only when stopped: summary() taken while running"
                )
        elif duration is None:
            duration = (
                (self.stopped_ns - self.started_ns) / 1e9
                if self.started_ns is not None and self.stopped_ns is not None
                else 0.0
            )
        nbytes = total or 0
        mean = nbytes / duration if duration and duration > 0 else 0.0
        peak = max(self.peak_bytes_per_s, mean) if nbytes else 0.0
        reached: bool | None = None
        if self.target_bytes_per_s is not None and self.started_ns is not None and total is not None:
            reached = mean >= REACHED_FRACTION * self.target_bytes_per_s
            if not reached:
                warnings.append(
                    f"noise never reached its target rate: {format_rate(mean)} of "
                    f"{format_rate(self.target_bytes_per_s)}"
                )
        if self.kind != "none" and self.started_ns is not None and total == 0:
            warnings.append("noise generator sent nothing")
        return {
            "kind": self.kind,
            "config": self.config,
            "clients": [dict(c) for c in self.clients],
            "total_bytes": nbytes,
            "duration_s": round(duration or 0.0, 3),
            "mean_bytes_per_s": round(mean, 1),
            "peak_bytes_per_s": round(peak, 1),
            "target_bytes_per_s": self.target_bytes_per_s,
            "reached_target": reached,
            "warning": "; ".join(dict.fromkeys(warnings)) or None,
        }


def format_rate(bytes_per_s: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s:.0f} B/s"


# --- entry point ------------------------------------------------------------------------------------------


def noise_generator(
    cfg: NoiseConfig,
    *,
    phase: str,
    writer: JsonlWriter | None,
    origin_ns: int,
    default_targets: list[str] | None = None,
) -> contextlib.AbstractAsyncContextManager[NoiseHandle]:
    """The generator for `cfg`, to be entered just before a measured phase.

    Raises UsageError (at construction, before anything starts) for a config that cannot run:
    no target, a missing program, a path that does not exist.
    """
    from kvbench.scenario import FioNoise, Iperf3Noise, NoNoise, TcpNoise

    if isinstance(cfg, NoNoise):
        return _NoNoise(cfg, phase, origin_ns)
    if isinstance(cfg, TcpNoise):
        return _TcpNoise(cfg, phase, writer, origin_ns, default_targets)
    if isinstance(cfg, Iperf3Noise):
        return _Iperf3Noise(cfg, phase, writer, origin_ns)
    if isinstance(cfg, FioNoise):
        return _FioNoise(cfg, phase, writer, origin_ns)
    raise TypeError(f"unknown noise config {type(cfg).__name__}")


class _NoNoise:
    def __init__(self, cfg: NoNoise, phase: str, origin_ns: int) -> None:
        self.handle = NoiseHandle(kind="none", config=cfg.model_dump(), phase=phase, origin_ns=origin_ns)

    async def __aenter__(self) -> NoiseHandle:
        return self.handle

    async def __aexit__(self, *exc: object) -> None:
        return None


def split_host_port(text: str, default_port: int | None, field_name: str) -> tuple[str, int | None]:
    """'host:port', '[v6]:port' or (with a default port) 'host'."""
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\s\[\]]+)(?::(\d+))?", text.strip())
    if not m:
        raise UsageError(f"{field_name}: '{text}' is not host:port")
    host = m.group(1) or m.group(3)
    port_text = m.group(2) or m.group(4)
    if port_text is None:
        if default_port is None:
            raise UsageError(f"{field_name}: '{text}' needs a port (host:port)")
        return host, None
    port = int(port_text)
    if not 0 < port < 65536:
        raise UsageError(f"{field_name}: port {port} out of range")
    return host, port


def _require_program(kind: str, program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise UsageError(
            f"noise.kind={kind}: the {program} program is not installed (Debian: apt-get install {program})"
        )
    return path


# --- child processes: common stop logic -------------------------------------------------------------------


async def _wait_exit(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        return False
    return True


async def _stop_processes(
    procs: list[asyncio.subprocess.Process], first_signal: int | None, grace: float
) -> None:
    """Ask (close stdin, or `first_signal`), then SIGTERM, then SIGKILL; always reaps."""
    for p in procs:
        if p.returncode is None:
            if first_signal is None:
                if p.stdin is not None and not p.stdin.is_closing():
                    p.stdin.close()
            else:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(first_signal)
    for sig, wait in ((None, grace), (signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        alive = [p for p in procs if p.returncode is None]
        if not alive:
            return
        if sig is not None:
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)
        await asyncio.gather(*(_wait_exit(p, wait) for p in alive))


def _kill_now(procs: list[asyncio.subprocess.Process]) -> None:
    """Last resort when the orderly stop itself was cancelled."""
    for p in procs:
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def _drain(stream: asyncio.StreamReader | None, limit: int = 4096) -> bytes:
    """Read a stream to EOF, keeping at most its first `limit` bytes."""
    if stream is None:
        return b""
    kept = b""
    while chunk := await stream.read(65536):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return kept


class _ProcessNoise:
    """Shared __aexit__ for generators that own child processes."""

    handle: NoiseHandle
    procs: list[asyncio.subprocess.Process]
    tasks: list[asyncio.Task[Any]]

    async def _stop(self) -> None:
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stop()
        except BaseException:
            _kill_now(self.procs)
            raise
        finally:
            self.handle.active = False
            if self.handle.stopped_ns is None:
                self.handle.stopped_ns = self.handle.now_ns()


# --- tcp --------------------------------------------------------------------------------------------------


@dataclass
class _Sender:
    name: str
    target: str
    proc: asyncio.subprocess.Process
    sent: int = 0  # cumulative, as last reported
    done: bool = False
    error: str | None = None


class _TcpNoise(_ProcessNoise):
    def __init__(
        self,
        cfg: TcpNoise,
        phase: str,
        writer: JsonlWriter | None,
        origin_ns: int,
        default_targets: list[str] | None,
    ) -> None:
        targets = list(cfg.targets) or list(default_targets or [])
        if not targets:
            raise UsageError("noise.targets: the tcp noise generator needs an explicit target (host:port)")
        self.targets = [split_host_port(t, None, "noise.targets") for t in targets]
        self.cfg = cfg
        self.handle = NoiseHandle(
            kind="tcp",
            config=cfg.model_dump(),
            phase=phase,
            origin_ns=origin_ns,
            writer=writer,
            target_bytes_per_s=cfg.rate_bytes_per_s,
        )
        self.senders: list[_Sender] = []
        self.procs = []
        self.tasks = []
        self._baseline: list[int] = []
        self._last: list[int] = []
        self._last_ns = 0

    async def __aenter__(self) -> NoiseHandle:
        try:
            await self._start()
        except BaseException:
            with contextlib.suppress(BaseException):
                await self._stop_senders()
            _kill_now(self.procs)
            raise
        return self.handle

    async def _start(self) -> None:
        cfg = self.cfg
        per_sender = cfg.rate_bytes_per_s / cfg.senders if cfg.rate_bytes_per_s else 0.0
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        for i in range(cfg.senders):
            host, port = self.targets[i % len(self.targets)]
            target = f"{host}:{port}"
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-S",  # no site-packages: the sender needs only the stdlib and kvbench (on PYTHONPATH)
                "-m",
                "kvbench.noise",
                "send",
                host,
                str(port),
                "--chunk-bytes",
                str(cfg.chunk_bytes),
                "--rate",
                repr(per_sender),
                "--max-duration",
                repr(cfg.max_duration_s),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            self.procs.append(proc)
            self.senders.append(_Sender(name=f"tcp-{i}", target=target, proc=proc))
        firsts = await asyncio.gather(*(self._first_line(s) for s in self.senders))
        failed = [(s, line) for s, line in zip(self.senders, firsts, strict=True) if line != "connected"]
        if failed:
            s, line = failed[0]
            raise UsageError(f"noise.targets: cannot stream to the tcp sink {s.target}: {line}")
        for s in self.senders:  # all connected: start them together (a started one would hog the CPU)
            assert s.proc.stdin is not None
            s.proc.stdin.write(b"go\n")
        await asyncio.gather(*(s.proc.stdin.drain() for s in self.senders if s.proc.stdin is not None))
        self._baseline = [0] * len(self.senders)
        self._last = [0] * len(self.senders)
        self.handle.live_bytes = lambda: sum(s.sent for s in self.senders) - sum(self._baseline)
        self.handle.started_ns = self._last_ns = self.handle.now_ns()
        self.handle.active = True
        self.tasks = [asyncio.create_task(self._read(s)) for s in self.senders]
        self.tasks.append(asyncio.create_task(self._sample()))

    async def _first_line(self, s: _Sender) -> str:
        assert s.proc.stdout is not None
        try:
            raw = await asyncio.wait_for(s.proc.stdout.readline(), SENDER_CONNECT_TIMEOUT_S)
        except TimeoutError:
            return f"the sender did not connect within {SENDER_CONNECT_TIMEOUT_S:.0f} s"
        line = raw.decode(errors="replace").strip()
        if not line:
            err = (await _drain(s.proc.stderr)).decode(errors="replace").strip().splitlines()
            return f"the sender exited: {err[-1] if err else 'no output'}"
        return line.removeprefix("error ")

    async def _read(self, s: _Sender) -> None:
        assert s.proc.stdout is not None
        while line := await s.proc.stdout.readline():
            text = line.decode(errors="replace").strip()
            if text.isdigit():
                s.sent = int(text)
            elif text.startswith("error "):
                s.error = text.removeprefix("error ")
        s.done = True

    async def _sample(self) -> None:
        h = self.handle
        assert h.started_ns is not None
        start = h.started_ns
        k = 1
        # bounded: the senders stop at max_duration_s; the sampler stops with them (+ slack)
        while h.now_ns() - start < (self.cfg.max_duration_s + 5.0) * 1e9:
            delay = (start + k * SAMPLE_INTERVAL_S * 1e9 - h.now_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            k += 1
            self._take_sample(full=True)
            if all(s.done for s in self.senders):
                h.active = False
                return

    def _take_sample(self, *, full: bool) -> None:
        now = self.handle.now_ns()
        dt = (now - self._last_ns) / 1e9
        cur = [s.sent for s in self.senders]
        per_client = {s.name: c - last for s, c, last in zip(self.senders, cur, self._last, strict=True)}
        if dt > 0:
            self.handle.record(now, dt, per_client, full=full and dt >= 0.5)
        self._last, self._last_ns = cur, now

    async def _stop_senders(self) -> None:
        await _stop_processes(self.procs, None, STOP_GRACE_S)

    async def _stop(self) -> None:
        sampler = self.tasks[-1:] if self.tasks else []
        readers = self.tasks[:-1]
        stop_ns = self.handle.now_ns()  # the phase ended: from here on, stragglers only
        await _cancel(sampler)
        await self._stop_senders()
        # the senders have exited: their pipes reach EOF, the readers end by themselves
        try:
            await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 5.0)
        except TimeoutError:
            await _cancel(readers)
        errs = await asyncio.gather(*(_drain(p.stderr) for p in self.procs), return_exceptions=True)
        h = self.handle
        if h.started_ns is None:
            return
        if self._last_ns:
            self._take_sample(full=False)
        h.stopped_ns = stop_ns
        h.total_bytes = sum(s.sent for s in self.senders) - sum(self._baseline)
        for s, err in zip(self.senders, errs, strict=True):
            rc = s.proc.returncode
            if s.error is None and rc not in (0, -signal.SIGTERM, -signal.SIGKILL) and isinstance(err, bytes):
                lines = err.decode(errors="replace").strip().splitlines()
                s.error = f"exit {rc}: {lines[-1] if lines else 'no output'}"
            if s.error:
                h.problems.append(f"{s.name} -> {s.target}: {s.error}")
            h.clients.append({"client": s.name, "target": s.target, "bytes": s.sent, "error": s.error})


# --- the sink ---------------------------------------------------------------------------------------------


class _SinkProtocol(asyncio.BufferedProtocol):
    def __init__(self, sink: TcpSink) -> None:
        self.sink = sink
        self.buf = bytearray(SINK_BUFFER_BYTES)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if len(self.sink.transports) >= SINK_MAX_CONNECTIONS:
            transport.abort()
            return
        self.transport = transport
        self.sink.transports.add(transport)
        self.sink.connections += 1

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.sink.bytes_received += nbytes

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.sink.transports.discard(self.transport)


class TcpSink:
    """A TCP sink that reads and discards bytes; counts them in `bytes_received`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.bytes_received = 0
        self.connections = 0  # accepted so far
        self.transports: set[asyncio.Transport] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _SinkProtocol(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self.transports):
                t.abort()
            self.transports.clear()
            await self._server.wait_closed()
            self._server = None
            await asyncio.sleep(0)  # let the aborted transports finish closing


@contextlib.asynccontextmanager
async def tcp_sink(host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[TcpSink]:
    """In-process sink (tests, the CLI): `async with tcp_sink() as s: ... s.port, s.bytes_received`."""
    sink = TcpSink(host, port)
    await sink.start()
    try:
        yield sink
    finally:
        await sink.close()


# --- iperf3 -----------------------------------------------------------------------------------------------

_RATE_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_bitrate(text: str) -> float:
    """iperf3's -b value (bits/s, decimal units, optional /burst) -> bits/s."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:/\d+)?\s*", text)
    if not m:
        raise UsageError(f"noise.bitrate: '{text}' is not an iperf3 rate such as 500M or 10G")
    return float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]


@dataclass
class _Iperf3Client:
    name: str
    server: str
    proc: asyncio.subprocess.Process
    spawn_ns: int
    result: dict[str, Any] | None = None
    error: str | None = None


class _Iperf3Noise(_ProcessNoise):
    def __init__(self, cfg: Iperf3Noise, phase: str, writer: JsonlWriter | None, origin_ns: int) -> None:
        self.program = _require_program("iperf3", "iperf3")
        self.servers = [(s, *split_host_port(s, 5201, "noise.servers")) for s in cfg.servers]
        target = None
        if cfg.bitrate is not None:
            target = parse_bitrate(cfg.bitrate) / 8 * cfg.parallel * len(cfg.servers) or None
        self.cfg = cfg
        self.handle = NoiseHandle(
            kind="iperf3",
            config=cfg.model_dump(),
            phase=phase,
            origin_ns=origin_ns,
            writer=writer,
            target_bytes_per_s=target,
        )
        self.clients: list[_Iperf3Client] = []
        self.procs = []
        self.tasks = []

    def command(self, host: str, port: int | None) -> list[str]:
        cfg = self.cfg
        cmd = [self.program, "-c", host]
        if port is not None:
            cmd += ["-p", str(port)]
        cmd += ["-P", str(cfg.parallel), "-t", str(max(1, math.ceil(cfg.max_duration_s))), "-J"]
        if cfg.bitrate is not None:
            cmd += ["-b", cfg.bitrate]
        return cmd

    async def __aenter__(self) -> NoiseHandle:
        try:
            for i, (server, host, port) in enumerate(self.servers):
                proc = await asyncio.create_subprocess_exec(
                    *self.command(host, port),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                self.procs.append(proc)
                self.clients.append(
                    _Iperf3Client(name=f"iperf3-{i}", server=server, proc=proc, spawn_ns=self.handle.now_ns())
                )
            self.tasks = [asyncio.create_task(self._collect(c)) for c in self.clients]
            self.handle.started_ns = self.handle.now_ns()
            self.handle.active = True
            # a client that cannot connect fails within moments: refuse to start rather than run quiet
            done, _ = await asyncio.wait(self.tasks, timeout=EARLY_FAIL_S)
            for c, t in zip(self.clients, self.tasks, strict=True):
                if t in done and c.error:
                    raise UsageError(f"noise.servers: iperf3 -c {c.server} failed: {c.error}")
        except BaseException:
            with contextlib.suppress(BaseException):
                await _stop_processes(self.procs, signal.SIGINT, STOP_GRACE_S)
            _kill_now(self.procs)
            await _cancel(self.tasks)
            raise
        return self.handle

    async def _collect(self, c: _Iperf3Client) -> None:
        out, err = await asyncio.gather(_drain(c.proc.stdout, MAX_CHILD_OUTPUT), _drain(c.proc.stderr))
        await c.proc.wait()
        try:
            data = json.loads(out.decode(errors="replace")) if out.strip() else None
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            c.result = data
            error = data.get("error")
            if error and "interrupt" not in str(error):  # SIGINT from us is the normal end
                c.error = str(error)
        else:
            lines = err.decode(errors="replace").strip().splitlines()
            c.error = f"exit {c.proc.returncode}: {lines[-1] if lines else 'no JSON output'}"

    async def _stop(self) -> None:
        self.handle.stopped_ns = self.handle.now_ns()
        await _stop_processes(self.procs, signal.SIGINT, STOP_GRACE_S)
        try:
            await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 5.0)
        except TimeoutError:
            await _cancel(self.tasks)
        self._record()

    def _record(self) -> None:
        """iperf3 -J prints only at the end: write its per-second intervals now, placed in time."""
        h = self.handle
        series: list[list[tuple[int, float, int]]] = []  # per client: (t_ns, dt_s, bytes)
        seconds = 0.0
        for c in self.clients:
            rows: list[tuple[int, float, int]] = []
            data = c.result or {}
            for iv in data.get("intervals") or []:
                s = iv.get("sum") or {}
                dt = float(s.get("end", 0)) - float(s.get("start", 0))
                if dt > 0:
                    rows.append((c.spawn_ns + int(float(s["end"]) * 1e9), dt, int(s.get("bytes", 0))))
            series.append(rows)
            sent = (data.get("end") or {}).get("sum_sent") or {}
            nbytes = int(sent.get("bytes", sum(r[2] for r in rows)))
            seconds = max(seconds, float(sent.get("seconds", 0) or 0))
            h.total_bytes += nbytes
            h.clients.append(
                {
                    "client": c.name,
                    "server": c.server,
                    "bytes": nbytes,
                    "bits_per_second": sent.get("bits_per_second"),
                    "retransmits": sent.get("retransmits"),
                    "error": c.error,
                }
            )
            if c.error:
                h.problems.append(f"{c.name} -> {c.server}: {c.error}")
        if seconds > 0:
            h.duration_s = seconds
        for k in range(max((len(r) for r in series), default=0)):
            present = [(c, r[k]) for c, r in zip(self.clients, series, strict=True) if k < len(r)]
            t_ns = max(x[1][0] for x in present)
            dt = max(x[1][1] for x in present)
            h.record(t_ns, dt, {c.name: x[2] for c, x in present}, full=dt >= 0.5)


# --- fio --------------------------------------------------------------------------------------------------

_FIO_WRITES = {"write", "randwrite", "rw", "randrw"}
_JSON_START = re.compile(rb"^\{", re.M)


class _FioNoise(_ProcessNoise):
    def __init__(self, cfg: FioNoise, phase: str, writer: JsonlWriter | None, origin_ns: int) -> None:
        self.program = _require_program("fio", "fio")
        path = Path(cfg.path).expanduser()
        if path.is_dir():
            self.target_args = [f"--directory={path}", "--unlink=1"]  # fio's own files, removed at the end
        elif path.exists():
            if cfg.rw in _FIO_WRITES:
                raise UsageError(
                    f"noise.path: rw={cfg.rw} would overwrite {path}; give a directory for write modes"
                )
            self.target_args = [f"--filename={path}"]
        else:
            raise UsageError(f"noise.path: {path} does not exist")
        self.cfg = cfg
        self.client = f"fio:{path}"
        self.handle = NoiseHandle(
            kind="fio", config=cfg.model_dump(), phase=phase, origin_ns=origin_ns, writer=writer
        )
        self.procs = []
        self.tasks = []
        self.last_report: dict[str, Any] | None = None
        self._last_bytes = 0
        self._last_ns = 0
        self._stderr = b""

    def command(self) -> list[str]:
        cfg = self.cfg
        return [
            self.program,
            "--name=kvbench-noise",
            "--output-format=json",
            "--status-interval=1",
            "--time_based",
            f"--runtime={max(1, math.ceil(cfg.max_duration_s))}",
            f"--rw={cfg.rw}",
            f"--bs={cfg.block_size}",
            f"--numjobs={cfg.jobs}",
            f"--size={cfg.size}",
            "--group_reporting",
            *self.target_args,
        ]

    async def __aenter__(self) -> NoiseHandle:
        proc = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.procs = [proc]
        self.handle.live_bytes = lambda: self._io_bytes(self.last_report or {})
        self.handle.started_ns = self._last_ns = self.handle.now_ns()
        self.handle.active = True
        self.tasks = [asyncio.create_task(self._read(proc)), asyncio.create_task(self._read_stderr(proc))]
        # a bad option or path makes fio exit at once: refuse to start rather than run quiet
        if await _wait_exit(proc, EARLY_FAIL_S) and self.last_report is None:
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.handle.active = False
            lines = self._stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"noise: fio exited {proc.returncode}: {lines[-1] if lines else 'no output'}")
        return self.handle

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        self._stderr = await _drain(proc.stderr)

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        buf = b""
        dec = json.JSONDecoder()
        while chunk := await proc.stdout.read(65536):
            buf += chunk
            while (m := _JSON_START.search(buf)) is not None:
                text = buf[m.start() :].decode(errors="replace")
                try:
                    obj, end = dec.raw_decode(text)
                except json.JSONDecodeError:
                    break  # incomplete: wait for more
                buf = text[end:].encode()
                if isinstance(obj, dict):
                    self._on_report(obj)
            if len(buf) > MAX_CHILD_OUTPUT:
                buf = b""

    @staticmethod
    def _io_bytes(report: dict[str, Any]) -> int:
        total = 0
        for job in report.get("jobs") or []:
            for d in ("read", "write", "trim"):
                total += int((job.get(d) or {}).get("io_bytes", 0))
        return total

    def _on_report(self, report: dict[str, Any]) -> None:
        self.last_report = report
        now = self.handle.now_ns()
        cur = self._io_bytes(report)
        dt = (now - self._last_ns) / 1e9
        if dt > 0 and (dt >= 0.05 or cur > self._last_bytes):
            self.handle.record(now, dt, {self.client: cur - self._last_bytes}, full=dt >= 0.5)
            self._last_bytes, self._last_ns = cur, now

    async def _stop(self) -> None:
        self.handle.stopped_ns = self.handle.now_ns()
        await _stop_processes(self.procs, signal.SIGINT, FIO_STOP_GRACE_S)
        try:
            await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 5.0)
        except TimeoutError:
            await _cancel(self.tasks)
        h = self.handle
        rep = self.last_report or {}
        h.total_bytes = self._io_bytes(rep)
        jobs = rep.get("jobs") or [{}]
        job_err = jobs[0].get("error", 0) if jobs else 0
        proc = self.procs[0]
        error: str | None = None
        if not rep:
            lines = self._stderr.decode(errors="replace").strip().splitlines()
            error = f"fio exited {proc.returncode} without a report: {lines[-1] if lines else 'no output'}"
        elif job_err:
            error = f"fio job error {job_err}"
        if error:
            h.problems.append(error)
        h.clients.append(
            {
                "client": self.client,
                "bytes": h.total_bytes,
                "read_bw_bytes": sum(int((j.get("read") or {}).get("bw_bytes", 0)) for j in jobs),
                "write_bw_bytes": sum(int((j.get("write") or {}).get("bw_bytes", 0)) for j in jobs),
                "error": error,
            }
        )


__all__ = [
    "NoiseHandle",
    "TcpSink",
    "format_rate",
    "noise_generator",
    "parse_bitrate",
    "split_host_port",
    "tcp_sink",
]
