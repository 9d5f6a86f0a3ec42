"""Mock profiles: YAML data files next to this module, validated into pydantic models.

A profile file may say ``extends: OTHER`` to start from another profile and override
fields (dicts merge recursively, other values replace).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from kvbench.errors import UsageError
from kvbench.mock.config import Profile

_ADAPTER: TypeAdapter[Any] = TypeAdapter(Profile)


def _files() -> dict[str, Any]:
    root = resources.files(__name__)
    return {p.name[: -len(".yaml")]: p for p in root.iterdir() if p.name.endswith(".yaml")}


def profile_names() -> list[str]:
    """The shipped profiles' names, sorted: what `target.mock_profile` and `--profile` may name."""
    return sorted(_files())


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def is_profile_path(name: str) -> bool:
    """Whether `name` names a YAML file (one's own profile, e.g. `kvbench fit`'s twin), not a shipped one."""
    return name.endswith((".yaml", ".yml")) or "/" in name


def _raw_file(name: str, seen: tuple[str, ...]) -> dict[str, Any]:
    path = Path(name)
    if not path.is_file():
        raise UsageError(f"--mock-profile {name}: no such profile file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"--mock-profile {name}: not a readable YAML file ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--mock-profile {name}: not a YAML mapping of profile fields")
    base = data.pop("extends", None)
    if base is not None:
        data = _merge(_raw(str(base), (*seen, name)), data)
    data["name"] = str(path.resolve())  # as a shipped profile is named by its file: runs record where it is
    return data


def _raw(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    if is_profile_path(name):
        return _raw_file(name, seen)
    files = _files()
    if name not in files:
        raise UsageError(f"--profile: unknown profile {name!r} (known: {', '.join(sorted(files))})")
    if name in seen:
        raise UsageError(f"profile {name!r}: 'extends' loops")
    data = yaml.safe_load(files[name].read_text(encoding="utf-8")) or {}
    base = data.pop("extends", None)
    if base is not None:
        data = _merge(_raw(str(base), (*seen, name)), data)
    data["name"] = name
    return dict(data)


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        child = node.get(p)
        if not isinstance(child, dict):
            raise UsageError(f"--set {key}: {p!r} is not a section")
        node = child
    node[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """`data` (a profile as a dict) with dotted-key overrides set in place, e.g.
    {"time_scale": 0.01, "tiers.G4.enabled": False}; a key through a non-section is a UsageError."""
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value)
    return data


def override_profile(profile: Any, overrides: dict[str, Any] | None) -> Any:
    """A validated copy of a profile model with `overrides` applied (the model itself if none)."""
    if not overrides:
        return profile
    return validate_profile(apply_overrides(profile.model_dump(), overrides))


def validate_profile(data: dict[str, Any], source: str = "profile") -> Any:
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith(("tiered", "fixed-delay")))
            problems.append(f"{source}: {loc + ': ' if loc else ''}{err['msg']}")
        raise UsageError("; ".join(problems)) from None


def load_profile(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """The profile `name` as a pydantic model (TieredProfile or FixedDelayProfile).

    `overrides` maps dotted keys to values, e.g. {"time_scale": 0.01, "tiers.G4.enabled": False}.
    """
    return validate_profile(apply_overrides(_raw(name), overrides), f"profile {name}")


def list_profiles() -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped profile, sorted by name."""
    return [(name, str(_raw(name).get("description", ""))) for name in sorted(_files())]
