"""How a report is written: number formatting, tables and sections, Markdown, HTML, terminal, JSON.

A report is a list of `Section`s (paragraphs and tables) built once from the run
summary (see `sections.py`) and written here to Markdown and to HTML from the
same data, so the two never disagree. Nothing here knows what a run is.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return "n/a"
        if x == 0:
            return "0"
        mag = abs(x)
        if mag >= 1000:
            return f"{x:,.0f}"
        d = max(0, digits - 1 - math.floor(math.log10(mag)))
        return f"{x:.{d}f}"
    return str(x)


def fmt_ci(ci: Any, digits: int = 3) -> str:
    if not ci:
        return "n/a"
    return f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def fmt_interval(ci: Any, digits: int = 3, what: str = "95% CI") -> str:
    """An interval labelled, for a cell that holds a value beside it: " (95% CI [a, b])", or nothing
    where there is none (one sample), never an unlabelled "n/a" after the value."""
    return f" ({what} {fmt_ci(ci, digits)})" if ci else ""


def fmt_ms_as_s(ms: float | None) -> str:
    return "n/a" if ms is None else fmt(ms / 1000.0)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    level: int = 2


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += ["#" * s.level + " " + s.title, ""]
        for p in s.paragraphs:
            out += [p, ""]
        for t in s.tables:
            if not t.rows:  # no empty tables: the section's own line says why, or this one does
                out += [f"*{t.caption}*: none.", ""] if t.caption else []
                continue
            if t.caption:
                out += [f"*{t.caption}*", ""]
            out.append("| " + " | ".join(_md_cell(h) for h in t.headers) + " |")
            out.append("|" + "---|" * len(t.headers))
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows]
            out.append("")
        for img in s.images:
            out += [f"![{img.stem}]({img.name})", ""]
    return "\n".join(out)


def _inline_md(text: str) -> str:
    """Escape, then turn **bold** and `code` into HTML."""
    esc = html.escape(text)
    esc = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", esc)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;
color:#17202a}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.9em}
th,td{border:1px solid #ccd1d1;padding:0.25em 0.6em;text-align:left;vertical-align:top}
th{background:#eaf2f8}
.banner{background:#fdebd0;border:2px solid #d68910;padding:0.6em 1em;font-weight:bold;margin:1em 0}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}
caption{caption-side:top;text-align:left;font-style:italic;padding-bottom:0.3em}
"""


def to_html(title: str, sections: list[Section], banner: str | None = None) -> str:
    out = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if banner:
        out.append(f"<div class='banner'>{html.escape(banner)}</div>")
    for s in sections:
        out.append(f"<h{s.level}>{html.escape(s.title)}</h{s.level}>")
        for p in s.paragraphs:
            out.append(f"<p>{_inline_md(p)}</p>")
        for t in s.tables:
            if not t.rows:
                out += [f"<p><em>{html.escape(t.caption)}</em>: none.</p>"] if t.caption else []
                continue
            out.append("<table>")
            if t.caption:
                out.append(f"<caption>{html.escape(t.caption)}</caption>")
            if any(t.headers):
                out.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers) + "</tr>")
            for r in t.rows:
                out.append("<tr>" + "".join(f"<td>{_inline_md(c)}</td>" for c in r) + "</tr>")
            out.append("</table>")
        for img in s.images:
            data = base64.b64encode(img.read_bytes()).decode("ascii")
            out.append(
                f"<figure><img alt='{html.escape(img.stem)}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{html.escape(img.name)}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out)


def print_table(table: Table, title: str, banner: str | None = None) -> None:
    try:
        from rich.console import Console
        from rich.table import Table as RichTable

        console = Console()
        if not console.is_terminal:
            console = Console(width=120)  # pipes and captured output: do not squash the table
        if banner:
            console.print(f"[bold yellow]{banner}[/]")
        rt = RichTable(title=title)
        for h in table.headers:
            rt.add_column(h)
        for r in table.rows:
            rt.add_row(*r)
        if not table.rows:
            rt.add_row(*(["(no requests)"] + [""] * (len(table.headers) - 1)))
        console.print(rt)
    except ImportError:  # pragma: no cover - rich ships with typer
        print(title)
        if banner:
            print(banner)
        print(" | ".join(table.headers))
        for r in table.rows:
            print(" | ".join(r))


# --------------------------------------------------------------------------- entry points


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, set | tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def clean_json(obj: Any) -> Any:
    """NaN/inf -> None, so summary.json is strict JSON; pydantic models become their dicts."""
    if hasattr(obj, "model_dump"):
        return clean_json(obj.model_dump())
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean_json(v) for v in obj]
    if hasattr(obj, "item"):
        return clean_json(obj.item())
    return obj


def write_json(path: Path, data: Any) -> None:
    from kvbench.results.files import write_text_atomic

    text = json.dumps(clean_json(data), indent=2, default=_json_default, allow_nan=False)
    write_text_atomic(path, text + "\n")
