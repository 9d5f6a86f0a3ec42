"""`kvbench mock serve|profiles`: run the mock server from the command line.

Imports stay cheap at module level (aiohttp and the server load inside the commands) so
that `kvbench --help` stays instant.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from kvbench.errors import KvbenchError, UsageError

SERVE_HELP = """Serve the mock OpenAI-compatible server with a modelled tiered KV cache.

Binds 127.0.0.1 unless --host is given. Examples:

  kvbench mock serve --profile ibm-g4 --port 8000

  kvbench mock serve --profile ci --fabric-port 0 --ground-truth gt.jsonl --announce

  kvbench mock serve --fault error_rate=0.2 --fault error_status=503

  kvbench mock serve --profile fixed-delay --set ttft_ms=20
"""

FAULT_HELP = (
    "Inject a fault, NAME[=VALUE], repeatable: error_rate=P, error_status=500|503, rate_limit=P, "
    "retry_after_s=S, close_after_tokens=K, bad_sse, bad_json, stall_first_token_s=S, stall_mid_stream_s=S, "
    "giant_chunk_bytes=B, endless_stream, endless_cap_s=S, exit_after_requests=N, every=N (stream faults "
    "hit every N-th request), seed=N."
)


def _parse_sets(values: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(raw)
    return out


def serve_command(
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="Profile name (see `kvbench mock profiles`).")
    ] = "ci",
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="HTTP port; 0 picks a free one.", min=0, max=65535)
    ] = 8000,
    fabric_port: Annotated[
        int | None,
        typer.Option(
            "--fabric-port", help="Open the fabric noise sink on this TCP port (0: a free one).", min=0
        ),
    ] = None,
    ground_truth: Annotated[
        Path | None, typer.Option("--ground-truth", help="Append one JSON line per request to this file.")
    ] = None,
    persist_dir: Annotated[
        Path | None,
        typer.Option("--persist-dir", help="Keep the G4 index in this directory across restarts."),
    ] = None,
    fault: Annotated[list[str] | None, typer.Option("--fault", help=FAULT_HELP)] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a profile field, KEY=VALUE with dotted keys (e.g. time_scale=0.01)."
        ),
    ] = None,
    announce: Annotated[
        bool,
        typer.Option(
            "--announce",
            help='Print one JSON line {"base_url", "fabric_port", "profile", "time_scale", "pid"} '
            "once listening.",
        ),
    ] = False,
    exit_on_stdin_eof: Annotated[
        bool, typer.Option("--exit-on-stdin-eof", help="Exit when stdin closes (used by spawned mocks).")
    ] = False,
) -> None:
    import asyncio

    from kvbench.mock.faults import parse_fault_flags

    faults = parse_fault_flags(fault or [])
    overrides = _parse_sets(set_ or [])
    from kvbench.mock.allocator import keep_large_buffers

    keep_large_buffers()  # the mock's own process: its request bodies' buffers used again warm
    asyncio.run(
        _serve(
            profile,
            host,
            port,
            fabric_port,
            ground_truth,
            persist_dir,
            faults,
            overrides,
            announce,
            exit_on_stdin_eof,
        )
    )


async def _serve(
    profile: str,
    host: str,
    port: int,
    fabric_port: int | None,
    ground_truth: Path | None,
    persist_dir: Path | None,
    faults: Any,
    overrides: dict[str, Any],
    announce: bool,
    exit_on_stdin_eof: bool,
) -> None:
    import asyncio
    import json
    import os
    import signal
    import threading

    from kvbench.mock.api.server import MockServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if exit_on_stdin_eof:

        def watch() -> None:
            try:
                while sys.stdin.buffer.read(65536):
                    pass
            except (OSError, ValueError):
                pass
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch, name="stdin-eof", daemon=True).start()
    server = MockServer(
        profile,
        host=host,
        port=port,
        ground_truth=ground_truth,
        fabric_port=fabric_port,
        faults=faults,
        persist_dir=persist_dir,
        profile_overrides=overrides,
        exit_process_on_fault=True,
    )
    async with server:
        fabric = server.fabric_address[1] if server.fabric_address else None
        if announce:
            line = {
                "base_url": server.base_url,
                "fabric_port": fabric,
                "profile": server.profile.name,
                "time_scale": getattr(server.profile, "time_scale", None),
                "pid": os.getpid(),
            }
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
        extra = f", fabric sink {host}:{fabric}" if fabric is not None else ""
        print(
            f"kvbench mock: profile {server.profile.name} serving {server.base_url}{extra}",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()


def profiles_command() -> None:
    """List the mock's profiles, one per line."""
    from kvbench.mock.profiles import list_profiles

    for name, description in list_profiles():
        print(f"{name:<12} {description}")


def build_app() -> typer.Typer:
    mock_app = typer.Typer(
        name="mock",
        help="The built-in mock server: an OpenAI-compatible endpoint with a modelled tiered KV cache "
        "(G1-G4).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    mock_app.command("serve", help=SERVE_HELP)(serve_command)
    mock_app.command("profiles")(profiles_command)
    return mock_app


def register(app: typer.Typer) -> None:
    """Mount `mock` (serve, profiles) on the kvbench CLI."""
    app.add_typer(build_app(), name="mock")


def main(argv: list[str] | None = None) -> None:
    """`python -m kvbench.mock ...`: the mock sub-app on its own."""
    app = build_app()
    try:
        app(args=argv, prog_name="kvbench-mock", standalone_mode=False)
    except KvbenchError as exc:
        for line in exc.lines():
            print(f"kvbench mock: {line}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        # by shape, not class: typer >= 0.29 raises its own bundled copy of click's exceptions, which
        # are no click.ClickException, and a bad flag then left a traceback
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            usage = any(k.__name__ == "UsageError" for k in type(exc).__mro__)
            sys.exit(2 if usage else code)
        raise
