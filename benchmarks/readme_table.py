"""Copy `make bench`'s side-by-side table from benchmarks/results/latest.md into docs/performance.md.

The block between the `bench-table` markers in latest.md (date, machine, versions, the table
and its definitions) replaces the block between the same markers in docs/performance.md (the
README links there; the table left the README to keep it short). Refuses a latest run without
its peers (--no-peers, or vLLM not installed) or with fewer than 3 repeats: the published
ratios must come from one full run that had them.

    python benchmarks/readme_table.py [--force]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"


def block(text: str, where: str) -> tuple[int, int]:
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise SystemExit(f"{where}: no {BEGIN} ... {END} block")
    return i, j + len(END)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="copy even a run without peers or 3 repeats")
    ap.add_argument("--results", default=str(HERE / "results" / "latest"), help="results prefix")
    ap.add_argument(
        "--readme", default=str(HERE.parent / "docs" / "performance.md"), help="page holding the table"
    )
    args = ap.parse_args()
    latest = Path(args.results)
    res = json.loads(latest.with_suffix(".json").read_text())
    if not args.force and (res.get("peers") != "ran" or res.get("repeats", 0) < 3):
        had = f"peers={res.get('peers')!r}, repeats={res.get('repeats')}"
        print(f"{Path(args.readme).name} not updated: latest run had {had}")
        return 0
    md = latest.with_suffix(".md").read_text()
    i, j = block(md, str(latest.with_suffix(".md")))
    readme = Path(args.readme)
    text = readme.read_text()
    a, b = block(text, str(readme))
    readme.write_text(text[:a] + md[i:j] + text[b:])
    aiperf = "with AIPerf's column" if res.get("aiperf") == "ran" else f"without AIPerf ({res.get('aiperf')})"
    print(f"{readme.name}: performance table from {latest.with_suffix('.md').name} ({res['date']}), {aiperf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
