"""Reading a claims file: the bounded YAML read, numbers as written, and the file-level checks.

A claims file goes through `kvbench.configfile.read_yaml` (size, alias and depth bounds) with
a loader of its own that keeps how each number was written (for the default `decimals`:
0.25 -> 2, 18 -> 0) and refuses a key given twice in one mapping (YAML would keep the last
value silently: 4.26 audited as 42.6). Then the pydantic model (`schema.py`) and the
file-level checks (`checks.file_problems`). What is wrong with the file as a whole is one
UsageError line (exit 2); what is wrong with one claim, figure, sizing check or bound is that
item's `invalid` verdict, found when auditing (`checks.item_problems`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvbench.audit.checks import file_problems
from kvbench.audit.quantities import written_decimals
from kvbench.audit.schema import ClaimsFile
from kvbench.configfile import read_yaml as read_bounded_yaml
from kvbench.errors import UsageError


class DuplicateKey(Exception):
    """A mapping key given twice (not a yaml.YAMLError: the message is ours, not 'syntax error')."""


class _WrittenFloat(float):
    written: str


class _WrittenInt(int):
    written: str


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps how each number was written and refuses duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise DuplicateKey(
                        f"line {key.start_mark.line + 1}: key '{key.value}' is given twice "
                        "(YAML would keep the last silently); keep one"
                    )
                seen.add(key.value)
        return super().construct_mapping(node, deep=deep)


def _float(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    assert isinstance(node, yaml.ScalarNode)
    out = _WrittenFloat(yaml.SafeLoader.construct_yaml_float(loader, node))
    out.written = str(node.value)
    return out


def _int(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    assert isinstance(node, yaml.ScalarNode)
    out = _WrittenInt(yaml.SafeLoader.construct_yaml_int(loader, node))
    out.written = str(node.value)
    return out


_Loader.add_constructor("tag:yaml.org,2002:float", _float)
_Loader.add_constructor("tag:yaml.org,2002:int", _int)
# PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent: 2.4e9 and 1e9 would be
# text (then refused as "quoted"). Papers write them so; read them as the numbers they are.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(p: Path) -> dict[str, Any]:
    """A claims file through the one bounded reader (kvbench.configfile), numbers as written."""
    if p.is_dir():
        raise UsageError(f"{p}: is a directory, not a claims file")
    try:
        return read_bounded_yaml(p, p.name, what="claims files", loader=_Loader)
    except DuplicateKey as exc:
        raise UsageError(f"{p.name}: {exc}") from None


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(top)"


def _fill_decimals(data: dict[str, Any]) -> dict[str, Any]:
    """Give figures and claims without `decimals` the decimals their number is written with."""
    out = dict(data)
    for section, key in (("figures", "value"), ("claims", "stated")):
        items = out.get(section)
        if not isinstance(items, list):
            continue
        filled = []
        for item in items:
            if isinstance(item, dict) and "decimals" not in item and isinstance(item.get(key), int | float):
                v = item[key]
                if not isinstance(v, bool) and math.isfinite(float(v)):
                    text = getattr(v, "written", None) or repr(v)
                    item = {**item, "decimals": written_decimals(text)}
            filled.append(item)
        out[section] = filled
    return out


def _message(e: dict[str, Any]) -> str:
    return f"{_loc(tuple(e['loc']))}: {str(e['msg']).removeprefix('Value error, ')}"


def parse_claims(data: Any, source: str = "claims", base_dir: Path | None = None) -> ClaimsFile:
    """Validate a parsed claims document; UsageError with `path: message` texts (file errors only)."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: expected a mapping at the top level")
    try:
        cf = ClaimsFile.model_validate({**_fill_decimals(data), "base_dir": base_dir, "source": source})
    except ValidationError as exc:
        raise UsageError(f"{source}: " + _join([_message(dict(e)) for e in exc.errors()])) from None
    problems = file_problems(cf)
    if problems:
        raise UsageError(f"{source}: " + _join(problems))
    return cf


def _join(problems: list[str], most: int = 3) -> str:
    """The first few problems, each cut to ~200 characters: one readable line, not a page."""
    shown = [p if len(p) <= 200 else p[:197] + "..." for p in problems[:most]]
    more = f" (and {len(problems) - most} more)" if len(problems) > most else ""
    return "; ".join(shown) + more


def load_claims(path: Path | str | None = None) -> ClaimsFile:
    """Read and validate a claims file; None or a bare name = a shipped dataset."""
    from kvbench.reference import reference_path

    if path is None:
        p = reference_path()
    else:
        p = Path(path)
        if not p.exists():
            if p.suffix == "" and "/" not in str(path):
                p = reference_path(str(path))
            else:
                raise UsageError(f"{path}: no such claims file")
    data = read_yaml(p)
    return parse_claims(data, source=p.name, base_dir=p.resolve().parent)


def load_reference(name: str = "ibm-g4") -> ClaimsFile:
    """A shipped dataset, validated (was kvbench.reference.load_reference)."""
    from kvbench.reference import reference_path

    return load_claims(reference_path(name))
