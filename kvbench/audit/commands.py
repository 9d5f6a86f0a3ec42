"""CLI commands of the audit: `kvbench audit` (claims file -> ledger) and `kvbench sizing`.

Thin: parse, call one function, print. Nothing heavy is imported at import time.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer

AUDIT_HELP = (
    "Audit published figures and claims: recompute every claim from the figures it cites.\n\n"
    "Prints a ledger: figures (published / derived / from the model / implied), each claim with "
    "its recomputed value and a verdict (consistent, discrepancy, unverifiable), the "
    "alternative readings that would give a stated value that does not match (other base of a "
    "percentage, time instead of rate, inverse ratio, other figure pairs, GB vs GiB...), sizing "
    "checks and model-based bounds, and all assumptions.\n\n"
    "Without CLAIMS the shipped dataset of the IBM G4 results (ibm-g4) is audited; CLAIMS may "
    "be a YAML file or a shipped dataset name. A claim, figure, sizing check or bound with a unit, "
    "dimension or expression error is 'invalid' (with the fix) and the rest is still judged. Exit "
    "code 0 whenever the ledger is produced; with --strict, 1 if any claim is a discrepancy or "
    "invalid, or any bound or sizing check a finding or invalid; 2 for a file that cannot be read "
    "(YAML, unknown keys, a key given twice, yes/no where a number is meant).\n\n"
    """\b
Claims file (YAML):
  schema: kvbench-claims/1
  name: my-paper
  model: {geometry: gpt-oss-120b}   # optional: preset or config.json
  figures:                          # value as printed, decimals as printed
    - {id: rate_quiet, value: 4.26, unit: req/s, decimals: 2}
    - {id: rate_noisy, value: 3.6, unit: req/s, decimals: 1}
    - {id: hidden, value: null, unit: s}          # not published
    - {id: per_req, expr: "tok / reqs", unit: tokens/request}
    - {id: kv_tok, from_model: bytes_per_token_full_only,
       unit: B/token}
  claims:
    - {id: drop, expr: "percent_drop(rate_quiet, rate_noisy)",
       stated: 18, unit: "%", decimals: 0}
  sizing:                           # optional
    - {id: ws, tokens: t, bytes: b, requests: r, prompts: p}
  bounds:                           # optional
    - {id: b1, kind: cold_reuse, requests: r, prompts: p,
       claim: drop}
    # also kind: prefill_scaling, serial_prefill (is a recompute
    # total reachable on N GPUs?) and bandwidth_headroom (does
    # competing traffic saturate a link?): fields in
    # kvbench/audit/__init__.py's docstring; see ibm-g4.yaml
Units (checked; all of them: kvbench audit --units):
s ms min h, B kB KB MB GB TB KiB MiB GiB TiB, bit kbit Mbit
Gbit Tbit (1/8 B), Gbps, tokens requests prompts connections
clients GPUs nodes ..., req/s GB/s B/token s/request, x %; "1" is
the unit of a plain number; a file's `units:` list of words adds
counted things.
decimals: "18%" = 0 means [17.5, 18.5); "24 million" = -6;
default: as the number is written (0.25 -> 2, 200 -> 0).
Changed default: a number without decimals used to be exact;
now 200 stands for [199.5, 200.5), so an old file's exact
counts may read "within input rounding": give decimals: null
to keep a figure exact.
Functions: ratio quotient difference sum product percent_change
percent_increase percent_drop percent_of reciprocal abs
(percent_* return fractions; a "%" claim shows them x 100).
"""
)


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN and infinity become null, tuples and sets lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [_clean(v) for v in obj]
    return obj


def register(app: typer.Typer) -> None:
    """Add the audit and sizing commands to `app`."""

    @app.command("audit", help=AUDIT_HELP)
    def audit_cmd(
        claims: Annotated[
            str | None, typer.Argument(help="Claims YAML file or shipped dataset name (default: ibm-g4).")
        ] = None,
        strict: Annotated[
            bool,
            typer.Option(
                "--strict",
                help="Exit 1 when any claim is a discrepancy or invalid, or any bound or sizing check a "
                "finding or invalid.",
            ),
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the ledger as JSON.")] = False,
        units: Annotated[
            bool, typer.Option("--units", help="Print the units a claims file may use, and exit.")
        ] = False,
    ) -> None:
        if units:
            from kvbench.audit.units import known_units

            print(known_units())
            return
        from kvbench.audit import audit, format_ledger, load_claims

        ledger = audit(load_claims(claims))
        if as_json:
            print(json.dumps(_clean(ledger.to_dict()), indent=2, default=str))
        else:
            import shutil
            import sys

            # the terminal's width; 100 columns into a file or a pipe, where nothing says how wide
            width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100
            print(format_ledger(ledger, width=width))
        if strict and (ledger.discrepancies or ledger.findings or ledger.invalid):
            raise typer.Exit(1)

    @app.command("sizing")
    def sizing_cmd(
        model: Annotated[
            str,
            typer.Argument(
                help="Preset (gpt-oss-120b, gpt-oss-20b, llama-3.1-8b), a Hugging Face config.json, "
                "or a folder holding one."
            ),
        ],
        tokens: Annotated[
            str | None, typer.Option("--tokens", help="Working set in tokens, e.g. 24000000 or 24M.")
        ] = None,
        kv_dtype: Annotated[
            str | None,
            typer.Option("--kv-dtype", help="KV cache dtype: fp16, bf16, fp8, fp32 (default: config)."),
        ] = None,
        lengths: Annotated[
            list[int] | None,
            typer.Option("--length", help="Prompt lengths to size (repeatable; default 30000, 130000)."),
        ] = None,
        capacity: Annotated[
            list[str] | None,
            typer.Option("--capacity", help="Tier capacity NAME=SIZE (repeatable), e.g. G1=96GB G2=1TiB."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
    ) -> None:
        """KV-cache bytes per token, per prompt and per working set, in GB and GiB.

        Shows both readings of sliding-window layers: holding only their window, or stored at full size.
        """
        from kvbench.errors import UsageError
        from kvbench.report.sizing import (
            DEFAULT_LENGTHS,
            format_sizing,
            parse_size,
            parse_tokens,
            resolve_geometry,
            sizing_table,
        )

        geo = resolve_geometry(model, kv_dtype=kv_dtype)
        bad = [n for n in lengths or [] if n <= 0]
        if bad:
            raise UsageError(f"--length: {bad[0]} is not a positive number of tokens")
        caps: dict[str, float] = {}
        for item in capacity or []:
            if "=" not in item:
                raise UsageError(f"capacity: expected NAME=SIZE, got '{item}'")
            name, size = item.split("=", 1)
            caps[name.strip()] = parse_size(size)
        table = sizing_table(
            geo,
            lengths=tuple(lengths) if lengths else DEFAULT_LENGTHS,
            tokens=parse_tokens(tokens) if tokens else None,
            capacities=caps or None,
        )
        print(json.dumps(table, indent=2) if as_json else format_sizing(table))
