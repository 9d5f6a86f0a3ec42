"""The structure rules, enforced: imports go only downward (import-linter contracts in
pyproject.toml), no module over 450 lines, no function over 100 lines, no package directory with
more than 15 modules at one level (a hall gets rooms), and every room says its job in one line."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kvbench"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 100
MAX_ROOM_MODULES = 15  # .py files in one directory, __init__ and __main__ included

# Allow-lists for a module or function over its limit while it waits for its split: empty now.
# An entry that is no longer over its limit fails the test, so the lists can only shrink.
BIG_MODULES: set[str] = set()
BIG_FUNCTIONS: set[str] = set()


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                key = f"{rel}:{node.name}"
                functions[key] = max(functions.get(key, 0), node.end_lineno - node.lineno + 1)
    return modules, functions


def test_no_module_over_the_limit() -> None:
    modules, _ = _sizes()
    over = {m: n for m, n in modules.items() if n > MAX_MODULE_LINES}
    assert set(over) <= BIG_MODULES, f"modules over {MAX_MODULE_LINES} lines: {set(over) - BIG_MODULES}"
    fixed = BIG_MODULES - set(over)
    assert not fixed, f"no longer over the limit, remove from BIG_MODULES: {fixed}"


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def test_no_package_is_a_hall() -> None:
    halls = {
        d.relative_to(ROOT).as_posix(): n
        for d in _packages()
        if (n := len(list(d.glob("*.py")))) > MAX_ROOM_MODULES
    }
    assert not halls, f"package directories over {MAX_ROOM_MODULES} modules (give them rooms): {halls}"


def test_every_room_says_its_job() -> None:
    """Each package's __init__ opens with a docstring whose first line says what the room is for."""
    silent = []
    for d in _packages():
        doc = ast.get_docstring(ast.parse((d / "__init__.py").read_text(encoding="utf-8")))
        if not doc or len(doc.splitlines()[0].split()) < 4:
            silent.append(d.relative_to(ROOT).as_posix())
    assert not silent, f"packages without a one-line job in their __init__ docstring: {silent}"


def test_no_function_over_the_limit() -> None:
    _, functions = _sizes()
    over = {f: n for f, n in functions.items() if n > MAX_FUNCTION_LINES}
    new = set(over) - BIG_FUNCTIONS
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines: {new}"
    fixed = BIG_FUNCTIONS - set(over)
    assert not fixed, f"no longer over the limit, remove from BIG_FUNCTIONS: {fixed}"


def test_imports_follow_the_layers() -> None:
    """cli -> run -> (load, client, engines, noise, report, audit, ...) -> (results, mock) -> scenario
    -> configfile -> model/errors; report and audit never import run/load/client; mock only itself."""
    pytest.importorskip("importlinter", reason="import-linter is not installed: pip install -e '.[dev]'")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is installed but its lint-imports command is not on PATH")
    proc = subprocess.run(
        [exe, "--no-cache"],  # reads the contracts from pyproject.toml in cwd
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _circles(exclude_type_checking: bool) -> list[list[str]]:
    """Every set of kvbench modules that import one another in a ring (strongly connected, > 1)."""
    grimp = pytest.importorskip("grimp", reason="grimp (import-linter's graph) is not installed")
    graph = grimp.build_graph("kvbench", exclude_type_checking_imports=exclude_type_checking, cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while True:
                w = stack.pop()
                ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                circles.append(sorted(ring))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return circles


@pytest.mark.parametrize("exclude_type_checking", [True, False], ids=["runtime", "with-type-checking"])
def test_no_import_circle(exclude_type_checking: bool) -> None:
    """No kvbench module imports itself back through others: at module level, inside functions (a
    circle hidden in a function is still one) and, in the second case, under `if TYPE_CHECKING:`
    too. The way out is moving the shared piece down into a small module both import."""
    circles = _circles(exclude_type_checking)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)
