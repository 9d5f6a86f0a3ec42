"""Find, read and validate a scenario file: the YAML plus only the overrides the user set, once.

Every problem becomes one `field.path: message` line (exit 2), through kvbench.configfile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvbench.configfile import MAX_FILE_BYTES, apply_overrides, read_yaml, validate
from kvbench.errors import ScenarioError
from kvbench.redact import redact as redact_record
from kvbench.scenario.model import Scenario
from kvbench.scenario.testtypes import moved_fields, translate_key

MAX_SCENARIO_BYTES = MAX_FILE_BYTES

# kvbench/scenarios is the one copy (shipped in the wheel); the repository's scenarios/ links to it
PACKAGE_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def scenario_search_path() -> list[Path]:
    return [Path.cwd() / "scenarios", PACKAGE_SCENARIOS]


def resolve_scenario_path(name_or_path: str) -> Path:
    """A path if it looks like one; else a name looked up in ./scenarios then the package's copies."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or "/" in name_or_path or p.exists():
        if not p.exists():
            raise ScenarioError([f"file not found: {name_or_path}"])
        if p.is_dir():
            raise ScenarioError([f"{name_or_path} is a directory, not a scenario file"])
        return p
    for folder in scenario_search_path():
        for ext in (".yaml", ".yml"):
            candidate = folder / f"{name_or_path}{ext}"
            if candidate.is_file():
                return candidate
    known = sorted({c.stem for f in scenario_search_path() if f.is_dir() for c in f.glob("*.yaml")})
    raise ScenarioError([f"no scenario named '{name_or_path}' (known: {', '.join(known) or 'none'})"])


def parse_yaml_text(raw: bytes, source: str) -> dict[str, Any]:
    return read_yaml(raw, source, max_bytes=MAX_SCENARIO_BYTES, what="scenarios", error=ScenarioError)


def validate_scenario(data: dict[str, Any], source: str | None = None) -> Scenario:
    moved = moved_fields(data)
    if moved:
        raise ScenarioError(moved, source)
    scn: Scenario = validate(Scenario, data, source, error=ScenarioError)
    return scn


def scenario_source(name_or_path: str, path: Path) -> str:
    """How messages name the scenario: the path as the user wrote it, or `scenario NAME` for a
    shipped one (never the installed copy's machine path)."""
    return name_or_path if str(path) == name_or_path or "/" in name_or_path else f"scenario {name_or_path}"


def raw_scenario(name_or_path: str) -> tuple[dict[str, Any], Path, str]:
    """The scenario's YAML as a dict (`test: NAME` expanded), its file and how messages name it."""
    path = resolve_scenario_path(name_or_path)
    source = scenario_source(name_or_path, path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError([f"cannot read: {exc.strerror}"], source) from None
    data = parse_yaml_text(raw, source)
    if isinstance(data.get("test"), str):  # the shorthand, expanded so that test.* overrides land in it
        data["test"] = {"kind": data["test"]}
    return data, path, source


def load_scenario(name_or_path: str, overrides: dict[str, Any] | None = None) -> tuple[Scenario, Path]:
    data, path, source = raw_scenario(name_or_path)
    if overrides:
        moved = moved_fields(data)
        if moved:
            raise ScenarioError(moved, source)
        data = apply_overrides(data, {translate_key(k): v for k, v in overrides.items()}, Scenario)
    return validate_scenario(data, source), path


def scenario_to_yaml(scenario: Scenario, redact: bool = False) -> str:
    """The resolved scenario as YAML; `redact` hides header values (they may carry credentials).

    Credentials anywhere (any URL's userinfo, secret headers, echoed tokens) are never written or
    printed, whatever `redact` says: every value goes through kvbench.redact.
    """
    data = redact_record(scenario.model_dump(mode="json"))
    if redact:
        data["target"]["headers"] = {k: "<redacted>" for k in data["target"]["headers"]}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
