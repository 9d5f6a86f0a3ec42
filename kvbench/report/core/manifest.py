"""What the report knows about a run that its typed record cannot say.

Every reader takes the run's manifest through `results.load_record`: today's typed
`results.schema.Manifest`, whatever version wrote it (the versioned migrations live there,
below the report, so that `results.load_manifest`, export and the report read one way).
`RunManifest` holds that record with the run directory and adds only the answers that need
more than the manifest:

- the mock's time scale (the ``ci`` profile runs ``ibm-g4`` at 1/100 of its pace) when the
  manifest predates ``target.mock_time_scale``: from the saved scenario's
  ``target.mock_overrides``, else from the shipped profile named by ``target.mock_profile``;
- the mock profile's KV geometry (from the shipped profile);
- the saved scenario's ``noisy`` settings (the report's effect threshold and capacity);
- what the phases tell the reader (an unverified cold cache, noise short of its target).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench.configfile import read_yaml
from kvbench.errors import ConfigFileError, UsageError
from kvbench.report.core.formats import fmt
from kvbench.results import SCENARIO, Manifest, RunRecord, load_record
from kvbench.results.reading import record_from_dict
from kvbench.results.schema import LoadShape


class TimeScale(BaseModel):
    """Real seconds per modelled second of the server (1.0: real time)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(1.0, gt=0, description="the mock's time_scale; 1.0 for real servers")
    source: str = Field(description="where the value was read from")


class RunManifest:
    """A run's typed record (`manifest`) and run directory, with the report's derived answers."""

    def __init__(self, record: RunRecord | Manifest | Mapping[str, Any], run_dir: Path | str = ".") -> None:
        self.run_dir = Path(run_dir)
        if isinstance(record, Manifest):
            record = RunRecord(manifest=record, version_read=record.manifest_version)
        elif not isinstance(record, RunRecord):  # a manifest dict: the same reading path
            record = record_from_dict(record, self.run_dir)
        self.record = record
        self.manifest = record.manifest

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def mock_profile_name(self) -> str | None:
        return self.manifest.target.mock_profile

    def load_shape(self) -> tuple[LoadShape | None, str]:
        """The load shape and where it was read from (a migration note, or the manifest)."""
        note = next((n for n in self.record.notes if n.startswith("load: ")), None)
        source = note.removeprefix("load: ").removeprefix("from ") if note else "manifest load"
        return self.manifest.load, source

    def phase_meta(self) -> dict[str, dict[str, Any]]:
        """Per phase name, in the order the phases ran: its manifest entry as a dict."""
        return {p.name: p.model_dump(mode="json") for p in self.manifest.phases}

    def phase_warnings(self) -> list[str]:
        """What the manifest says the reader must know about its phases (unverified cold, noise short)."""
        notes = []
        for p in self.manifest.phases:
            if p.cold_verified is False:
                notes.append(f"phase {p.name}: the cold cache was NOT verified (cold figures may be warm)")
            nz = p.noise or {}
            if nz and nz.get("reached_target") is False:
                mean = (nz.get("mean_bytes_per_s") or 0) / 1e9
                target = (nz.get("target_bytes_per_s") or 0) / 1e9
                notes.append(
                    f"phase {p.name}: noise reached {fmt(mean)} GB/s, short of its {fmt(target)} GB/s target"
                )
        return notes

    def scenario(self) -> dict[str, Any]:
        """The saved scenario.yaml as a raw mapping ({} when absent or unreadable).

        Read raw, not validated: the scenario schema may have moved on since the run.
        """
        path = self.run_dir / SCENARIO
        if not path.exists():
            return {}
        try:
            return read_yaml(path)
        except ConfigFileError:
            return {}

    def noisy_settings(self) -> dict[str, Any]:
        """The saved scenario's `noisy` section ({} when absent): top level, or under the test section."""
        scn = self.scenario()
        test = scn.get("test")
        section = test.get("noisy") if isinstance(test, dict) else scn.get("noisy")
        return section if isinstance(section, dict) else {}

    def mock_profile_geometry(self) -> tuple[str | dict[str, Any] | None, str]:
        """The mock profile's KV geometry (a preset name or fields) and where it came from."""
        shipped = _shipped_profile(self.mock_profile_name) if self.manifest.simulated else None
        geometry = getattr(shipped, "geometry", None)
        if geometry is None:
            return None, ""
        return geometry, f"mock profile {self.mock_profile_name}"

    def mock_profile_model(self) -> Any:
        """The run's mock profile as a model (a shipped one or a profile file), None when unreadable."""
        return _shipped_profile(self.mock_profile_name) if self.manifest.simulated else None

    def time_scale(self) -> TimeScale:
        if not self.manifest.simulated:
            return TimeScale(value=1.0, source="real server")
        recorded = self.manifest.target.mock_time_scale
        if recorded is not None and recorded > 0:
            return TimeScale(value=recorded, source="manifest target.mock_time_scale")
        overrides = (self.scenario().get("target") or {}).get("mock_overrides") or {}
        if isinstance(overrides, dict) and isinstance(overrides.get("time_scale"), int | float):
            value = float(overrides["time_scale"])
            if value > 0:
                return TimeScale(value=value, source="scenario.yaml target.mock_overrides.time_scale")
        name = self.mock_profile_name
        shipped = _shipped_profile(name)
        if shipped is None:
            return TimeScale(
                value=1.0, source=f"unknown (mock profile {name or '?'} is not shipped): taken as real time"
            )
        return TimeScale(
            value=float(getattr(shipped, "time_scale", 1.0)), source=f"shipped mock profile {name}"
        )


def read_run_manifest(run_dir: Path | str) -> RunManifest:
    """The run's record; a one-line UsageError when the manifest is missing, not JSON or does not fit."""
    return RunManifest(load_record(run_dir), run_dir)


def _shipped_profile(name: str | None) -> Any:
    """The shipped mock profile `name` (a pydantic model), or None when there is none by that name."""
    if not name:
        return None
    try:
        from kvbench.mock.profiles import load_profile
    except ModuleNotFoundError:  # a build without the mock
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load_profile(name)
    except UsageError:
        return None
