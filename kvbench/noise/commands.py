"""`kvbench noise ...`: sink (the receiver of tcp noise) and tcp (a standalone generator).

Thin: parse, call one function, print. The generators and the sink are imported inside the
commands so that `kvbench --help` stays instant (this package's __init__ imports nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from kvbench.scenario import TcpNoise

noise_app = typer.Typer(
    name="noise",
    help=(
        "Background traffic for the noisy-neighbour test: run `kvbench noise sink` on any machine, "
        "point a scenario's noise.targets (kind: tcp) at it, or try it with `kvbench noise tcp`."
    ),
    no_args_is_help=True,
)


@noise_app.command("sink")
def sink_cmd(
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0 to accept other machines' traffic).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 = any free port (printed).")] = 0,
    duration: Annotated[
        float | None, typer.Option(min=0.001, help="Stop after this many seconds (default: until Ctrl-C).")
    ] = None,
) -> None:
    """Receive and discard TCP noise; print the port, then bytes/s every second."""
    import asyncio

    try:
        asyncio.run(_run_sink(host, port, duration))
    except KeyboardInterrupt:
        print("stopped", flush=True)


async def _run_sink(host: str, port: int, duration: float | None) -> None:
    import asyncio
    import time

    from kvbench.noise.handle import format_rate
    from kvbench.noise.sink import tcp_sink

    async with tcp_sink(host, port) as sink:
        print(f"listening on {sink.address}", flush=True)
        t0 = last_t = time.perf_counter()
        deadline = None if duration is None else t0 + duration
        last_bytes = 0
        k = 1
        while deadline is None or last_t < deadline:
            tick = t0 + k if deadline is None else min(t0 + k, deadline)
            await asyncio.sleep(max(0.0, tick - time.perf_counter()))
            k += 1
            now = time.perf_counter()
            got = sink.bytes_received - last_bytes
            print(
                f"t={now - t0:7.1f}s  {format_rate(got / (now - last_t))}  "
                f"connections={len(sink.transports)}  total={sink.bytes_received:,} B",
                flush=True,
            )
            last_t, last_bytes = now, sink.bytes_received
        print(f"received {sink.bytes_received:,} bytes in {last_t - t0:.1f} s", flush=True)


@noise_app.command("tcp")
def tcp_cmd(
    target: Annotated[list[str], typer.Option("--target", "-t", help="Sink host:port (repeatable).")],
    senders: Annotated[int, typer.Option(min=1, max=64, help="Parallel sender processes.")] = 4,
    rate: Annotated[
        float | None, typer.Option(min=1, help="Target total bytes/s (default: as fast as possible).")
    ] = None,
    chunk_bytes: Annotated[int, typer.Option(min=1, help="Bytes per send call.")] = 262_144,
    duration: Annotated[float, typer.Option(min=0.001, help="Seconds of noise.")] = 10.0,
) -> None:
    """Generate tcp noise at TARGET for DURATION seconds; print per-second rates and a summary."""
    import asyncio
    import json

    from kvbench.scenario import TcpNoise

    cfg = TcpNoise(
        targets=target,
        senders=senders,
        rate_bytes_per_s=rate,
        chunk_bytes=chunk_bytes,
        max_duration_s=duration,
    )
    try:
        summary = asyncio.run(_run_tcp(cfg, duration))
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return
    print(json.dumps(summary, indent=2))


async def _run_tcp(cfg: TcpNoise, duration: float) -> dict[str, Any]:
    import asyncio
    import time

    from kvbench.noise import noise_generator
    from kvbench.noise.handle import format_rate

    class _Printer:  # a RowWriter that prints the total rows
        def write(self, row: dict[str, Any]) -> None:
            if row["client"] == "total":
                print(f"t={row['t_ns'] / 1e9:7.1f}s  {format_rate(row['bytes_per_s'])}", flush=True)

    origin = time.perf_counter_ns()
    async with noise_generator(cfg, phase="cli", writer=_Printer(), origin_ns=origin) as handle:
        while handle.active and (time.perf_counter_ns() - origin) / 1e9 < duration:
            await asyncio.sleep(0.1)
    return handle.summary()


def register(app: typer.Typer) -> None:
    app.add_typer(noise_app, name="noise")
