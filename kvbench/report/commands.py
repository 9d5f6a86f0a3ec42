"""CLI commands of the reporter: report, compare, audit, sizing.

Thin: parse, call one function, print. pandas and matplotlib are imported by the
functions called, never at import time, so `kvbench --help` stays instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

AUDIT_HELP = (
    "Audit published figures and claims: recompute every claim from the figures it cites.\n\n"
    "Prints a ledger: figures (published / derived / from the model / implied), each claim with "
    "its recomputed value and a verdict (consistent, discrepancy, unverifiable), the "
    "alternative readings that would give a stated value that does not match (other base of a "
    "percentage, time instead of rate, inverse ratio, other figure pairs, GB vs GiB...), sizing "
    "checks and model-based bounds, and all assumptions.\n\n"
    "Without CLAIMS the shipped dataset of the IBM G4 results (ibm-g4) is audited; CLAIMS may "
    "be a YAML file or a shipped dataset name. Exit code 0 whenever the ledger is produced; "
    "with --strict, 1 if any claim is a discrepancy; 2 for a bad claims file.\n\n"
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
    # kvbench/report/claims.py's docstring; see ibm-g4.yaml
Units: s ms min, B kB MB GB TB KiB MiB GiB TiB, tokens requests
prompts, req/s GB/s B/token, x %. decimals: "18%" = 0 means
[17.5, 18.5); "24 million" = -6.
Functions: ratio quotient difference sum product percent_change
percent_increase percent_drop percent_of reciprocal abs
(percent_* return fractions; a "%" claim shows them x 100).
"""
)


def register(app: typer.Typer) -> None:
    """Add the report, compare, audit and sizing commands to `app`."""

    @app.command("report")
    def report_cmd(
        run_dir: Annotated[
            Path, typer.Argument(help="A run directory (results/<run-id>/): complete, interrupted or killed.")
        ],
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the key table.")] = False,
        geometry: Annotated[
            str | None,
            typer.Option(
                help="KV geometry preset or config.json for the warm-TTFT bandwidth fit, "
                "when the manifest does not say (e.g. gpt-oss-120b)."
            ),
        ] = None,
    ) -> None:
        """Write summary.json, report.md, report.html (self-contained) and PNG plots into RUN_DIR.

        Statistics per phase and label (TTFT, ITL, end-to-end, dispatch delay, requests/s, tokens/s),
        speedups recomputed from the data with bootstrap 95% CIs, model fits, and, for runs naming a
        reference dataset (ibm-g4), measured next to published figures. Works offline.
        """
        from kvbench.report.render import write_report

        write_report(run_dir, quiet=quiet, geometry=geometry)

    @app.command("compare")
    def compare_cmd(
        run_dirs: Annotated[
            list[Path], typer.Argument(help="Two or more run directories; the first is the baseline.")
        ],
        out: Annotated[
            Path | None,
            typer.Option(
                "--out",
                "-o",
                help="Output folder (default: results/compare-<timestamp>, or ./ "
                "when there is no results/ folder).",
            ),
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the tables.")] = False,
    ) -> None:
        """Compare runs side by side (two servers, two configs, quiet vs noisy): tables and plots.

        Ratios are against the FIRST run given, matched by label (cold, warm, cached, baseline, quiet, noisy).
        """
        from kvbench.report.compare import compare_runs

        compare_runs(run_dirs, out, quiet=quiet)

    @app.command("audit", help=AUDIT_HELP)
    def audit_cmd(
        claims: Annotated[
            str | None, typer.Argument(help="Claims YAML file or shipped dataset name (default: ibm-g4).")
        ] = None,
        strict: Annotated[
            bool, typer.Option("--strict", help="Exit 1 when any claim is a discrepancy.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the ledger as JSON.")] = False,
    ) -> None:
        from kvbench.report.claims import audit, format_ledger, load_claims

        ledger = audit(load_claims(claims))
        if as_json:
            from kvbench.report.render import _clean

            print(json.dumps(_clean(ledger.to_dict()), indent=2, default=str))
        else:
            print(format_ledger(ledger))
        if strict and ledger.discrepancies:
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
