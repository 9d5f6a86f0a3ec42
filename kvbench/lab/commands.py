"""`kvbench lab up | status | down`. Thin: check root, parse, call one function, print."""

from __future__ import annotations

from typing import Annotated

import typer

lab_app = typer.Typer(
    name="lab",
    help=(
        "A real networked KV tier on this machine (root): a storage network namespace behind a veth "
        "pair shaped with tc, an sshd file server in it mounted on the host as the G4 path (sshfs), "
        "two llama-server instances saving their KV there, and noise receivers on the same link. "
        "Then: kvbench run ttft-lab | persistence-lab | throughput-lab --noisy."
    ),
    no_args_is_help=True,
)


def _say(line: str) -> None:
    print(f"[lab] {line}", flush=True)


@lab_app.command("up")
def up_cmd(
    rate_mbit: Annotated[
        float, typer.Option("--rate-mbit", help="Link bandwidth per direction, Mbit/s.")
    ] = 400.0,
    delay_ms: Annotated[
        float | None,
        typer.Option(
            "--delay-ms", help="One-way link delay, ms (needs sch_netem). Default: 0.2 where netem exists."
        ),
    ] = None,
    port_base: Annotated[
        int, typer.Option(help="Engine A on 127.0.0.1:BASE+1, B on BASE+2 (raw llama-servers +11, +12).")
    ] = 8470,
    slots: Annotated[int, typer.Option(help="llama-server slots (-np) per instance.")] = 4,
    ctx: Annotated[int, typer.Option(help="Context tokens per slot.")] = 16384,
    threads: Annotated[int | None, typer.Option(help="llama-server threads (default: all cores).")] = None,
    engines: Annotated[
        bool, typer.Option("--engines/--no-engines", help="Start the two llama-server instances.")
    ] = True,
) -> None:
    """Build the lab: shaped link, file server + G4 mount, noise receivers, two engines."""
    from pydantic import ValidationError

    from kvbench.errors import UsageError
    from kvbench.lab.config import LabConfig
    from kvbench.lab.system import require_root
    from kvbench.lab.up import lab_up

    require_root()
    try:
        cfg = LabConfig(
            rate_mbit=rate_mbit, delay_ms=delay_ms, port_base=port_base, slots=slots, ctx=ctx, threads=threads
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UsageError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None
    from kvbench.redact import redact

    state = lab_up(cfg, _say, engines=engines)
    for e in state.engines:
        print(f"{e.name}: {redact(e.url)}")  # an engine URL may carry credentials: shown without
    _say("up: kvbench run throughput-lab --noisy  (kvbench lab status; kvbench lab down)")


@lab_app.command("status")
def status_cmd() -> None:
    """Print what is up (namespace, link shape, mounts, engines with URLs, sinks); exit 1 if not up."""
    from kvbench.lab.config import load_state, state_dir
    from kvbench.lab.status import status_lines
    from kvbench.lab.system import require_root

    require_root()
    from kvbench.redact import redact

    lines, ok = status_lines(state_dir(), load_state())
    for line in lines:
        print(redact(line))  # engine URLs among them
    if not ok:
        raise typer.Exit(1)


@lab_app.command("down")
def down_cmd() -> None:
    """Remove every piece of the lab (idempotent; works after a crash, without the state file)."""
    from kvbench.lab.config import load_state, state_dir
    from kvbench.lab.down import lab_down
    from kvbench.lab.system import require_root

    require_root()
    removed = lab_down(state_dir(), load_state())
    if removed:
        _say("removed: " + "; ".join(removed))
    else:
        _say("nothing to remove: the lab was down")


def register(app: typer.Typer) -> None:
    app.add_typer(lab_app, name="lab")
