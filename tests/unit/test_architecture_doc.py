"""docs/ARCHITECTURE.md is true to the tree: every module is on the map, and the map names no
module that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kvbench"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

_SECTION = re.compile(r"^`kvbench/(\w+)/`", re.M)
_MODULE = re.compile(r"`([\w/]+\.py)`")


def _sections() -> dict[str, str]:
    """The page's text per top-level package ('' = the top-level modules and the rest)."""
    text = DOC.read_text(encoding="utf-8")
    text = text.split("## How to add", 1)[0]  # the how-to names modules by example, not as a list
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
