"""Reading a run's manifest.json, whoever wrote it: one path for every reader.

A manifest is read in three steps, the same for a finished, an interrupted, a killed and a
hand-made run:

1. its version: `manifest_version` when written, else recognised from its shape (VERSIONS);
2. the migrations from that version to today's, one step per version (MIGRATIONS), each
   saying in words what it filled in or changed (`RunRecord.notes`);
3. the typed `schema.Manifest`, tolerant of fields this kvbench does not know (a run written
   by a newer kvbench): they are set aside, kept in `RunRecord.unknown` and warned about
   once, and the rest is validated as strictly as the writer is.

A manifest that does not fit even so (a missing required field, a wrong type) is one line
naming the file and the field (UsageError). Writing stays strict: the runner builds a
`Manifest`, whose unknown keys are errors.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kvbench.configfile import read_yaml
from kvbench.errors import ConfigFileError, UsageError
from kvbench.results.files import MANIFEST, REQUESTS, SCENARIO, read_jsonl, read_manifest
from kvbench.results.schema import MANIFEST_VERSION, Manifest

if TYPE_CHECKING:
    import pandas as pd

# What each manifest version looked like (results/README.md says the same).
VERSIONS: dict[int, str] = {
    1: "a dict written before the typed record (kvbench 439297a and the hand-made fixtures): "
    "no load section; the TTFT phase may be labelled cold+warm",
    2: "the typed record (2efe139): a load section; no target.mock_time_scale",
    3: "target.mock_time_scale, and optional sections added since (lab, cluster, clock, sessions); "
    "no manifest_version",
    4: "manifest_version written",
}

# labels written by early kvbench versions, read as today's
_LEGACY_LABELS = {"cold+warm": "ttft"}


@dataclass(frozen=True)
class RunRecord:
    """A run's manifest as today's type, and what reading it took."""

    manifest: Manifest
    version_read: int  # the version as written (recognised from the shape when not written)
    notes: tuple[str, ...] = ()  # what the migrations filled in or changed, in words
    unknown: Mapping[str, Any] = field(default_factory=dict)  # dotted path -> value, kept as read


Migration = Callable[[dict[str, Any], Path | None], list[str]]


def detect_version(raw: Mapping[str, Any]) -> int:
    """The manifest's version: written, or the oldest its shape shows (a hand-edited old run
    with one newer field still gets the old steps)."""
    written = raw.get("manifest_version")
    if isinstance(written, int) and not isinstance(written, bool) and written >= 1:
        return written
    phases = raw.get("phases")
    phases = phases if isinstance(phases, list) else []
    if "load" not in raw or any(isinstance(p, Mapping) and p.get("label") in _LEGACY_LABELS for p in phases):
        return 1
    target = raw.get("target")
    return 3 if isinstance(target, Mapping) and "mock_time_scale" in target else 2


def _v1_to_v2(raw: dict[str, Any], run_dir: Path | None) -> list[str]:
    """Today's phase labels; the load shape from the run's saved scenario.yaml."""
    notes: list[str] = []
    for phase in raw.get("phases") or []:
        if isinstance(phase, dict) and phase.get("label") in _LEGACY_LABELS:
            phase["label"] = _LEGACY_LABELS[phase["label"]]
    if raw.get("load") is not None:
        return notes
    scenario = _saved_scenario(run_dir)
    load = load_from_scenario(scenario, raw.get("prompts")) if scenario else None
    if load is not None:
        raw["load"] = load
        notes.append(f"load: from {SCENARIO} (a version-1 manifest has no load section)")
    else:
        notes.append(f"load: not recorded (a version-1 manifest has none, and {SCENARIO} does not say)")
    return notes


def _v2_to_v3(raw: dict[str, Any], run_dir: Path | None) -> list[str]:
    # nothing in the run directory says the mock's time scale; the report derives it from the
    # scenario's overrides or the shipped profile (report.manifest)
    return []


def _v3_to_v4(raw: dict[str, Any], run_dir: Path | None) -> list[str]:
    return []  # version 4 only writes its number


# MIGRATIONS[n] takes a version-n manifest to version n + 1 (in place), returning its notes
MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def migrate(raw: Mapping[str, Any], run_dir: Path | None = None) -> tuple[dict[str, Any], int, list[str]]:
    """(today's shape, the version read, notes): every step from the manifest's version up."""
    data = json.loads(json.dumps(raw))  # a deep copy: the migrations edit in place
    version = detect_version(data)
    notes: list[str] = []
    if version > MANIFEST_VERSION:
        notes.append(
            f"written by a newer kvbench (manifest version {version}; this one reads up to "
            f"{MANIFEST_VERSION}): read as version {MANIFEST_VERSION}"
        )
    for step in range(version, MANIFEST_VERSION):
        notes += MIGRATIONS[step](data, run_dir)
    data["manifest_version"] = MANIFEST_VERSION
    return data, version, notes


_warned: set[tuple[str, tuple[str, ...]]] = set()


def record_from_dict(raw: Mapping[str, Any], run_dir: Path | None = None) -> RunRecord:
    """A manifest dict as a RunRecord (see the module docstring); UsageError when it does not fit."""
    source = str(run_dir / MANIFEST) if run_dir is not None else MANIFEST
    if not isinstance(raw, Mapping):
        raise UsageError(f"{source}: not a JSON object")
    data, version, notes = migrate(raw, run_dir)
    known, unknown = split_unknown(Manifest, data)
    if unknown and (source, tuple(unknown)) not in _warned:
        _warned.add((source, tuple(unknown)))
        newer = f" (manifest version {version}, newer than this kvbench's {MANIFEST_VERSION})"
        warnings.warn(
            f"{source}{newer if version > MANIFEST_VERSION else ''}: fields this kvbench does not know, "
            f"kept but not read: {', '.join(unknown)}",
            stacklevel=2,
        )
    try:
        manifest = Manifest.model_validate(known)
    except ValidationError as exc:
        raise UsageError(f"{source}: {_first_error(exc)}") from None
    return RunRecord(manifest=manifest, version_read=version, notes=tuple(notes), unknown=unknown)


def load_record(run_dir: Path | str) -> RunRecord:
    """The run directory's manifest as a RunRecord; a missing or broken manifest is one UsageError line."""
    run_dir = Path(run_dir)
    try:
        raw = read_manifest(run_dir)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{run_dir / MANIFEST}: not JSON: {exc}") from None
    return record_from_dict(raw, run_dir)


def load_manifest(run_dir: Path | str) -> Manifest:
    """manifest.json as today's typed Manifest (runs written by earlier kvbench versions included)."""
    return load_record(run_dir).manifest


def load_run(run_dir: Path | str) -> pd.DataFrame:
    """requests.jsonl as a DataFrame, one row per request (failed ones included), of a directory
    whose manifest reads (one UsageError line when it does not: not a run directory)."""
    import pandas as pd

    load_record(run_dir)
    return pd.DataFrame(read_jsonl(Path(run_dir) / REQUESTS))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {err['msg']}{more}"


def _saved_scenario(run_dir: Path | None) -> dict[str, Any] | None:
    """The run's scenario.yaml as a raw mapping (not validated: the scenario schema moves on)."""
    path = run_dir / SCENARIO if run_dir is not None else None
    if path is None or not path.exists():
        return None
    try:
        return read_yaml(path)
    except ConfigFileError:
        return None


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def load_from_scenario(scn: Mapping[str, Any], prompts_info: Any) -> dict[str, Any] | None:
    """A `schema.LoadShape` dict from a saved scenario (None when it lacks lengths or max_tokens)."""

    def section(name: str) -> dict[str, Any]:
        value = scn.get(name)
        return value if isinstance(value, dict) else {}

    load, prompts = section("load"), section("prompts")
    lengths = prompts.get("lengths")
    max_tokens = _int(section("output").get("max_tokens"))
    if isinstance(lengths, dict) and {"min", "max"} <= set(lengths):
        lengths = {"min": lengths["min"], "max": lengths["max"]} | {
            "distribution": lengths.get("distribution") or "uniform"
        }
    elif not (isinstance(lengths, list) and lengths):
        return None
    if max_tokens is None:
        return None
    kind = str(load.get("kind") or "sequential")
    built = prompts_info.get("count") if isinstance(prompts_info, Mapping) else None
    count = _int(built) or _int(prompts.get("count")) or (len(lengths) if isinstance(lengths, list) else None)
    shape: dict[str, Any] = {
        "kind": kind,
        "concurrency": _int(load.get("max_concurrency") if kind == "rate" else load.get("concurrency")) or 1,
        "rate": load.get("rate") if kind == "rate" else None,
        "requests": _int(load.get("requests")),
        "prompt_count": count or 0,
        "lengths": lengths,
        "max_tokens": max_tokens,
    }
    return shape


def split_unknown(
    model: type[BaseModel], data: Mapping[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keys `model` knows, at every depth; the others as dotted path -> value)."""
    known: dict[str, Any] = {}
    unknown: dict[str, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key)
        if info is None:
            unknown[prefix + key] = value
            continue
        sub, item = _nested(info.annotation)
        if sub is not None and isinstance(value, Mapping):
            value, more = split_unknown(sub, value, f"{prefix}{key}.")
            unknown |= more
        elif item is not None and isinstance(value, list):
            parts = [
                split_unknown(item, v, f"{prefix}{key}[{i}].") if isinstance(v, Mapping) else (v, {})
                for i, v in enumerate(value)
            ]
            value = [v for v, _ in parts]
            for _, more in parts:
                unknown |= more
        known[key] = value
    return known, unknown


def _nested(annotation: Any) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    """(the model a field holds, the model its list holds), through `X | None` and other unions."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, None
    if get_origin(annotation) is list:
        (arg,) = get_args(annotation) or (None,)
        return None, arg if isinstance(arg, type) and issubclass(arg, BaseModel) else None
    sub = item = None
    for arg in get_args(annotation):
        s, i = _nested(arg)
        sub, item = sub or s, item or i
    return sub, item
