"""Copy `make bench`'s side-by-side table from benchmarks/results/latest.md into README.md.

The block between the `bench-table` markers in latest.md (date, machine, versions, the table
and its definitions) replaces the block between the same markers in the README. Refuses a
latest run without its peers (--no-peers, or vLLM not installed) or with fewer than 3
repeats: the README's ratios must come from one full run that had them.

    python benchmarks/readme_table.py [--force]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"


def block(text: str, where: str) -> tuple[int, int]:
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise SystemExit(f"{where}: no {BEGIN} ... {END} block")
    return i, j + len(END)


def main() -> int:
    latest = HERE / "results" / "latest"
    res = json.loads(latest.with_suffix(".json").read_text())
    if "--force" not in sys.argv and (res.get("peers") != "ran" or res.get("repeats", 0) < 3):
        print(f"README not updated: latest run had peers={res.get('peers')!r}, repeats={res.get('repeats')}")
        return 0
    md = latest.with_suffix(".md").read_text()
    i, j = block(md, str(latest.with_suffix(".md")))
    readme = HERE.parent / "README.md"
    text = readme.read_text()
    a, b = block(text, str(readme))
    readme.write_text(text[:a] + md[i:j] + text[b:])
    print(f"README.md: performance table from {latest.with_suffix('.md').name} ({res['date']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
