"""The kvbench command line. Thin: parse, validate, call one function, print.

Heavy imports (pandas, matplotlib, the runner) happen inside commands so that
`kvbench --help` stays instant.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Annotated, TextIO

import typer

from kvbench import __version__
from kvbench.errors import KvbenchError, describe_os_error

app = typer.Typer(
    name="kvbench",
    help=(
        "Benchmark OpenAI-compatible LLM servers with KV-cache offload.\n\n"
        "Reproduces the published G4 tests (TTFT cold vs cached, throughput over 28 connections, "
        "throughput under a noisy neighbour) against any server, or against the built-in mock when "
        "no --base-url is given."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help: rich markup would read `kvbench[ray]` as a style tag and drop it; click wraps to
    # the terminal's width (COLUMNS when piped) once its 80-column cap is lifted
    rich_markup_mode=None,
    context_settings={"max_content_width": 10_000},
)

_state = {"verbose": False}


def _version(value: bool) -> None:
    if value:
        print(f"kvbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks and debug logs.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    _state["verbose"] = verbose


def _register_subcommands() -> None:
    # Each area owns its commands; importing these modules must stay cheap.
    if _state.get("registered"):
        return
    _state["registered"] = True
    from kvbench.run import commands as run_commands

    run_commands.register(app)
    for module_name in (
        "kvbench.mock.commands",
        "kvbench.report.commands",
        "kvbench.audit.commands",
        "kvbench.noise.commands",
        "kvbench.engines.commands",
        "kvbench.lab.commands",
        "kvbench.traces.commands",
        "kvbench.sweep.commands",
        "kvbench.twin.commands",
    ):
        __import__(module_name, fromlist=["register"]).register(app)


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # Python's format prints the warning's source line; a user needs only what was found
    print(f"kvbench: warning: {message}", file=sys.stderr if file is None else file)


def main() -> None:
    import warnings

    from kvbench.redact import RedactingStream

    _register_subcommands()
    warnings.showwarning = _one_line_warning
    real = sys.stdout, sys.stderr
    # every line this command prints (its console, its errors, click's usage text, a stray log
    # record) goes through kvbench.redact: a secret in an exception or a server's words never shows
    sys.stdout, sys.stderr = RedactingStream(real[0]), RedactingStream(real[1])
    _guard_logging()
    _remember_cli_secrets(sys.argv[1:])
    try:
        _main()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = real


def _main() -> None:
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except KvbenchError as exc:
        _fail(exc, [f"kvbench: {line}" for line in exc.lines()], exc.exit_code)
    except OSError as exc:
        # a file a command reads or writes: read-only, full, missing, a directory where a file goes
        _fail(exc, [f"kvbench: {describe_os_error(exc)}"], 2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("kvbench: aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("kvbench: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click's usage errors (typer vendors click) and the unexpected
        code = getattr(exc, "exit_code", None)
        if hasattr(exc, "show") and isinstance(code, int):
            exc.show()
            sys.exit(code)
        _fail(exc, [f"kvbench: internal error: {type(exc).__name__}: {exc} (rerun with --verbose)"], 1)


def _fail(exc: BaseException, lines: list[str], code: int) -> None:
    """The error's lines and exit code; `--verbose` prints the traceback first (redacted like every
    line, through sys.stderr) and keeps the same exit code, so verbosity never changes a script's
    outcome."""
    if _state["verbose"]:
        import traceback

        sys.stderr.write("".join(traceback.format_exception(exc)))
    for line in lines:
        print(line, file=sys.stderr)
    sys.exit(code)


def _guard_logging() -> None:
    """Records no handler takes go to logging.lastResort: mask them there too."""
    import logging

    from kvbench.redact import RedactingFilter

    last = logging.lastResort
    if last is not None and not any(isinstance(f, RedactingFilter) for f in last.filters):
        last.addFilter(RedactingFilter())


def _remember_cli_secrets(argv: list[str]) -> None:
    """The secrets a command line hands over (URL credentials, the --api-key-env key), masked in
    all this process prints from the start, before the run's own preflight learns them."""
    import os

    from kvbench.redact import remember, secrets_of_url

    for i, arg in enumerate(argv):
        if "@" in arg:  # --base-url U, --set target.base_url=U, --over target.base_url=U1,U2
            for url in re.findall(r"(?i)[a-z][a-z0-9+.-]*://[^\s,\[\]{}'\"]+", arg):
                remember(*secrets_of_url(url))
        if arg == "--api-key-env" and i + 1 < len(argv):
            remember(os.environ.get(argv[i + 1]))
        elif arg.startswith("--api-key-env="):
            remember(os.environ.get(arg.partition("=")[2]))
