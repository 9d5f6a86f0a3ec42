"""A module named like a standard-library module shadows it for any script run from its folder:
`engines/make_hf_model.py` runs as a script in the vLLM venv, so `engines/tokenize.py` once broke
the standard library's `tokenize` there (linecache: partially initialized module)."""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kvbench"


def test_no_module_is_named_like_a_standard_library_module() -> None:
    names = {p.stem for p in PACKAGE.rglob("*.py")} - {"__init__", "__main__"}
    names |= {p.name for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    shadowing = sorted(names & set(sys.stdlib_module_names))
    assert not shadowing, f"modules named like standard-library modules (rename them): {shadowing}"
