"""The tcp noise sender process: `python -S -m kvbench.noise.sender HOST PORT [options]`.

One process per sender streams zeros to a TCP sink. The tcp generator (tcp.py) starts several, waits
until each prints `connected`, writes `go` to all of them at once, reads their cumulative byte counts
and stops them by closing their stdin.

Start-up time is the reason this is its own module: it imports only the standard library pieces
below (no asyncio, whose ssl import costs ~0.1 s per process, no pydantic, nothing else of kvbench:
`kvbench/__init__.py` and `kvbench/noise/__init__.py` are kept import-free for it), so a sender
connects ~25 ms after it is spawned. Keep it that way: a test checks what it imports.

`--declare RATE` first sends the line `KVBNOISE RATE` (modelled bytes/s): the mock's fabric port then
models this flow at RATE and its real bytes only confirm it is on (kvbench.mock.costs.fabric); any other
sink discards the line with the rest.

Protocol on stdout, one line each: `connected` | `error MESSAGE` | a cumulative byte count
(every SENDER_REPORT_S and once at the end). On stdin: `go` starts sending; EOF (or any other line)
stops it.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import time

SENDER_REPORT_S = 0.05  # a sender reports its byte count this often


def _send_main(
    host: str, port: int, chunk_bytes: int, rate: float, max_duration_s: float, declare: float = 0.0
) -> int:
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
        if declare > 0:
            sock.sendall(f"KVBNOISE {declare!r}\n".encode("ascii"))
        sock.settimeout(0.2)
        print("connected", file=out, flush=True)
        # wait for "go" (all senders connected); EOF instead means stop before starting
        if (
            not sel.select(max(0.0, deadline - time.monotonic()))
            or os.read(sys.stdin.fileno(), 16) != b"go\n"
        ):
            print(0, file=out, flush=True)
            return 0
        # a rate sends one report interval's worth per call (smooth at the report's resolution), but
        # not below 4 KiB, so a slow flow is not thousands of tiny syscalls; --chunk-bytes caps both
        size = chunk_bytes if rate <= 0 else min(chunk_bytes, max(4096, int(rate * SENDER_REPORT_S)))
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


def main(argv: list[str] | None = None, prog: str = "python -m kvbench.noise.sender") -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog=prog, description="kvbench noise sender process: stream zeros to a TCP sink (tcp noise)"
    )
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--chunk-bytes", type=int, default=262_144)
    ap.add_argument("--rate", type=float, default=0.0, help="bytes/s for this sender; 0 = unlimited")
    ap.add_argument("--max-duration", type=float, default=3600.0)
    ap.add_argument("--declare", type=float, default=0.0, help="offered rate to declare (modelled bytes/s)")
    args = ap.parse_args(argv)
    if args.chunk_bytes <= 0 or args.max_duration <= 0:
        ap.error("--chunk-bytes and --max-duration must be positive")
    return _send_main(args.host, args.port, args.chunk_bytes, args.rate, args.max_duration, args.declare)


if __name__ == "__main__":
    sys.exit(main())
