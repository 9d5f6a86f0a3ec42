"""CLI commands of the reporter: report, compare (audit and sizing live in kvbench.audit.commands).

Thin: parse, call one function, print. pandas and matplotlib are imported by the
functions called, never at import time, so `kvbench --help` stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the report and compare commands to `app`."""

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
        from kvbench.errors import file_errors
        from kvbench.report.sweep.tables import is_sweep_dir, write_sweep_report

        with file_errors():
            if is_sweep_dir(run_dir):  # a sweep directory: its summary, from sweep.json
                write_sweep_report(run_dir, quiet=quiet, redraw=True)
                return
            from kvbench.report.render import write_report

            write_report(run_dir, quiet=quiet, geometry=geometry)

    @app.command("compare")
    def compare_cmd(
        run_dirs: Annotated[
            list[Path],
            typer.Argument(help="Two or more run directories (or two sweeps); the first is the baseline."),
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
        Two sweep directories compare point by point, matched by the swept fields' values.
        """
        from kvbench.errors import file_errors
        from kvbench.report.compare import compare_runs

        with file_errors():
            compare_runs(run_dirs, out, quiet=quiet)
