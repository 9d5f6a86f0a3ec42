"""docs/ARCHITECTURE.md is true to the tree: every module is on the map, the map names no
module that does not exist, and the test-type table has a true row for every registered test type."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kvbench"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

_SECTION = re.compile(r"^`kvbench/(\w+)/`", re.M)
_MODULE = re.compile(r"`([\w/]+\.py)`")
_TABLE_HEADING = "## Test types: where each one lives"
_PATH = re.compile(r"`((?:kvbench|tests)/[\w./<>-]*)`")


def _sections() -> dict[str, str]:
    """The page's text per top-level package ('' = the top-level modules and the rest)."""
    text = DOC.read_text(encoding="utf-8")
    # the test-type table and the how-to name paths from the repository root, not as a package list
    text = text.split(_TABLE_HEADING, 1)[0].split("## How to add", 1)[0]
    parts: dict[str, str] = {}
    marks = [(m.start(), m.group(1)) for m in _SECTION.finditer(text)]
    parts[""] = text[: marks[0][0]] if marks else text
    for (start, name), (end, _) in zip(marks, [*marks[1:], (len(text), "")], strict=True):
        parts[name] = text[start:end]
    return parts


def _modules() -> dict[str, set[str]]:
    """Module paths relative to their top-level package ('' = kvbench/ itself)."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            found.setdefault("", set()).add(f"kvbench/{rel.as_posix()}")
        else:
            found.setdefault(rel.parts[0], set()).add(Path(*rel.parts[1:]).as_posix())
    return found


def test_every_module_is_on_the_map() -> None:
    sections = _sections()
    missing: list[str] = []
    for package, modules in _modules().items():
        named = set(_MODULE.findall(sections.get(package, "")))
        for module in modules:
            if module in {"kvbench/__init__.py", "kvbench/__main__.py"}:
                continue
            if module.endswith("__init__.py") and module.count("/") == 0 and package:
                continue  # a package's own __init__ is named by its section heading
            if module not in named:
                missing.append(f"{package or 'kvbench'}: {module}")
    assert not missing, f"modules missing from docs/ARCHITECTURE.md: {sorted(missing)}"


def test_the_map_names_only_real_modules() -> None:
    sections = _sections()
    modules = _modules()
    for package, text in sections.items():
        for name in _MODULE.findall(text):
            if package == "":
                if not name.startswith("kvbench/"):
                    continue  # prose before the map ("each area's `commands.py`")
                assert (ROOT / name).is_file(), f"docs/ARCHITECTURE.md names {name}, which does not exist"
            else:
                assert name in modules.get(package, set()), (
                    f"docs/ARCHITECTURE.md names {name} under kvbench/{package}/, which does not exist"
                )


def _test_type_rows() -> dict[str, list[str]]:
    """The test-type table: first cell (the test type, backticks stripped) -> the row's cells."""
    text = DOC.read_text(encoding="utf-8")
    assert _TABLE_HEADING in text, f"docs/ARCHITECTURE.md lost its section {_TABLE_HEADING!r}"
    section = text.split(_TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "test type":
            assert len(cells) == 6, f"the test-type table has columns {cells}"
            continue
        rows[cells[0].strip("`")] = cells
    return rows


def test_every_test_type_has_a_row() -> None:
    from kvbench.run.registry import TEST_TYPES

    rows = _test_type_rows()
    assert {name.split()[0] for name in rows} == set(TEST_TYPES), "rows and TEST_TYPES differ"
    for name, cells in rows.items():
        assert len(cells) == 6, f"test-type row {name!r} has {len(cells)} cells, not 6"
        test = TEST_TYPES[name.split()[0]]
        if name == test.name:  # a mode's row (`throughput --noisy`) names a part of the section
            assert f"`{test.section.__name__}`" in cells[1], f"{name}: section is {test.section.__name__}"
        plan_file = test.plan.__module__.replace(".", "/") + ".py"
        assert f"`{plan_file}`" in cells[2], f"{name}: its plan lives in {plan_file}"
        assert "`tests/" in cells[5], f"{name}: the row names no tests"


def test_every_path_in_the_test_type_table_exists() -> None:
    missing = []
    for name, cells in _test_type_rows().items():
        for cell in cells:
            for path in _PATH.findall(cell):
                target = ROOT / path
                if not (target.is_dir() if path.endswith("/") else target.is_file()):
                    missing.append(f"{name}: {path}")
    assert not missing, f"the test-type table names paths that do not exist: {missing}"
