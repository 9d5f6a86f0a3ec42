"""`write_report(run_dir)`: summary.json, report.md, a self-contained report.html and PNG plots.

What the runner calls at the end of a run and what `kvbench report RUN_DIR` runs.
It reads only saved results, so it works offline on any run directory: complete,
interrupted, killed (status still "running": "did not finish") or empty. The
pieces live beside it: `summary` (the typed RunSummary), `published` (measured
vs a dataset's `compare:` section), `sections` (what the report says), `formats`
(Markdown, HTML, terminal, JSON), `plots`, and `compare` (`kvbench compare`).
"""

from __future__ import annotations

from pathlib import Path

from kvbench.report.core.formats import clean_json as _clean  # noqa: F401  (the audit command's JSON output)
from kvbench.report.core.formats import print_table, to_html, to_markdown, write_json
from kvbench.results.files import write_text_atomic


def write_report(run_dir: Path, quiet: bool = False, geometry: str | None = None) -> Path:
    """Write summary.json, report.md, report.html and PNG plots into `run_dir`; return report.html's path.

    Prints the key table unless `quiet`. Works on complete, interrupted, killed and empty runs.
    """
    from kvbench.report.noisy.section import console_lines
    from kvbench.report.published.comparison import published_points, published_speedups
    from kvbench.report.run_plots import Published, save_run_plots
    from kvbench.report.sections import build_sections, key_table
    from kvbench.report.summary import build_summary

    run_dir = Path(run_dir)
    summary, df, noise_rows = build_summary(run_dir, geometry=geometry)
    overlay = None
    if summary.published is not None:
        ref, scale = summary.published.reference, summary.published.time_scale
        overlay = Published(
            name=ref, points=published_points(ref, scale), speedups=published_speedups(ref), time_scale=scale
        )
    images = save_run_plots(run_dir, df, summary, noise_rows, overlay)
    if summary.sessions:
        from kvbench.report.sessions.turns import read_turns, save_session_plots

        images += save_session_plots(read_turns(run_dir), run_dir)
    if summary.run.test == "replay":
        from kvbench.report.replay.section import save_replay_plots

        images += save_replay_plots(run_dir)
    from kvbench.report.slices.section import slices_section

    over_time = slices_section(run_dir, df, geometry)  # the run in time slices: table, slices.csv, PNGs
    extra = [over_time] if over_time is not None else []
    from kvbench.report.slo_section import slo_section

    slo = slo_section(run_dir)  # the scenario's slo: attainment and goodput per phase
    extra += [slo] if slo is not None else []
    summary = summary.model_copy(
        update={"plots": [p.name for p in images + [i for s in extra for i in s.images]]}
    )
    write_json(run_dir / "summary.json", summary)
    run = summary.run
    title = f"kvbench report: {run.run_id}"
    sections = build_sections(summary, images, extra)
    write_text_atomic(run_dir / "report.md", to_markdown(title, sections))
    html_path = run_dir / "report.html"
    write_text_atomic(html_path, to_html(title, sections, summary.banner))
    if not quiet:
        print_table(key_table(summary), f"{run.run_id} ({run.status_text})", summary.banner)
    for line in console_lines(summary):  # a noisy run's three lines: effect, bottleneck, noise
        print(line)
    if summary.twin is not None:  # a twin's prediction says so, and where it extrapolates
        from kvbench.report.twin.range import warning_lines

        print("\n".join(warning_lines(summary.twin)))
    if not quiet and slo is not None:
        from kvbench.report.slo_section import slo_console_lines

        print("\n".join(slo_console_lines(slo)))
    if not quiet:
        print(f"report: {html_path}")
    return html_path
