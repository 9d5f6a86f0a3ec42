"""The one place the report reads a run's manifest.json and saved scenario.yaml.

Today the manifest is a dict written by the runner (its keys are documented in
results/README.md); a typed `results.schema.Manifest` is on its way. Every
report module reads the manifest through `RunManifest`, so switching to the
typed model is a change in this file only. It also answers the two questions
whose answer is not written in the manifest of older runs:

- the run's load shape (kind, concurrency or rate, requests, prompts, lengths):
  from ``manifest["load"]`` when the runner wrote it, else from the run
  directory's saved ``scenario.yaml``;
- the mock's time scale (the ``ci`` profile runs ``ibm-g4`` at 1/100 of its
  pace): from ``target.mock_time_scale``, else from the shipped profile named
  by ``target.mock_profile`` and the scenario's ``target.mock_overrides``.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench.errors import UsageError

SCENARIO_FILE = "scenario.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoadShape(_Strict):
    """How the run issued its requests, as the report shows it."""

    kind: str | None = Field(None, description="sequential | concurrent | rate (None: not recorded)")
    concurrency: int | None = Field(None, description="connections kept busy (closed loop)")
    rate_per_s: float | None = Field(None, description="mean arrivals per second (open loop)")
    arrivals: str | None = Field(None, description="inter-arrival distribution of a rate load")
    max_concurrency: int | None = Field(None, description="cap on requests in flight of a rate load")
    requests: int | None = Field(None, description="requests per phase (None: one per prompt)")
    prompt_count: int | None = Field(None, description="distinct prompts built for the run")
    lengths: str | None = Field(None, description="requested prompt lengths, as text")
    shared_prefix_tokens: int | None = Field(None, description="tokens every prompt shares")
    max_tokens: int | None = Field(None, description="output tokens asked per request")
    source: str = Field(description="where these values were read from")


class TimeScale(_Strict):
    """Real seconds per modelled second of the server (1.0: real time)."""

    value: float = Field(1.0, gt=0, description="the mock's time_scale; 1.0 for real servers")
    source: str = Field(description="where the value was read from")


@dataclass(frozen=True)
class RunManifest:
    """Read-only view of manifest.json (+ scenario.yaml) with the report's accessors."""

    raw: dict[str, Any]
    run_dir: Path

    # ---------------------------------------------------------------- plain fields

    def _str(self, key: str) -> str | None:
        value = self.raw.get(key)
        return None if value is None else str(value)

    @property
    def scenario_name(self) -> str | None:
        return self._str("scenario_name")

    @property
    def test(self) -> str | None:
        return self._str("test")

    @property
    def started_at(self) -> str | None:
        return self._str("started_at")

    @property
    def ended_at(self) -> str | None:
        return self._str("ended_at")

    @property
    def error(self) -> str | None:
        return self._str("error")

    @property
    def run_id(self) -> str:
        return str(self.raw.get("run_id") or self.run_dir.name)

    @property
    def status(self) -> str:
        return str(self.raw.get("status") or "unknown")

    @property
    def target(self) -> dict[str, Any]:
        return dict(self.raw.get("target") or {})

    @property
    def simulated(self) -> bool:
        return bool(self.raw.get("simulated") or self.target.get("kind") == "mock")

    @property
    def reference(self) -> str | None:
        ref = self.raw.get("reference")
        return str(ref) if ref else None

    @property
    def phases(self) -> list[dict[str, Any]]:
        return [p for p in self.raw.get("phases") or [] if isinstance(p, dict)]

    def phase_meta(self) -> dict[str, dict[str, Any]]:
        """Per phase name, in the order the phases ran: duration_s, noise, cold_verified."""
        keys = ("duration_s", "noise", "cold_verified")
        return {str(p["name"]): {k: p.get(k) for k in keys} for p in self.phases if p.get("name")}

    def phase_warnings(self) -> list[str]:
        """What the manifest says the reader must know about its phases (unverified cold, noise short)."""
        from kvbench.report.formats import fmt

        notes = []
        for name, p in self.phase_meta().items():
            if p["cold_verified"] is False:
                notes.append(f"phase {name}: the cold cache was NOT verified (cold figures may be warm)")
            nz = p["noise"] or {}
            if nz and nz.get("reached_target") is False:
                mean, target = (
                    (nz.get("mean_bytes_per_s") or 0) / 1e9,
                    (nz.get("target_bytes_per_s") or 0) / 1e9,
                )
                notes.append(
                    f"phase {name}: noise reached {fmt(mean)} GB/s, short of its {fmt(target)} GB/s target"
                )
        return notes

    @property
    def mock_profile_name(self) -> str | None:
        """The mock profile's name (older manifests may hold the profile itself as a dict)."""
        profile = self.target.get("mock_profile")
        if isinstance(profile, dict):
            return str(profile.get("name") or "custom")
        return str(profile) if profile else None

    # ---------------------------------------------------------------- derived answers

    def scenario(self) -> dict[str, Any]:
        """The saved scenario.yaml as a raw mapping ({} when absent or unreadable).

        Read raw, not validated: the scenario schema may have moved on since the run.
        """
        import yaml

        path = self.run_dir / SCENARIO_FILE
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return {}
        return data if isinstance(data, dict) else {}

    def noisy_settings(self) -> dict[str, Any]:
        """The saved scenario's `noisy` section ({} when absent): top level, or under the test section."""
        scn = self.scenario()
        test = scn.get("test")
        section = test.get("noisy") if isinstance(test, dict) else scn.get("noisy")
        return section if isinstance(section, dict) else {}

    def mock_profile_geometry(self) -> tuple[str | dict[str, Any] | None, str]:
        """The mock profile's KV geometry (a preset name or fields) and where it came from."""
        profile = self.target.get("mock_profile")
        if isinstance(profile, dict):
            return profile.get("geometry"), "manifest target.mock_profile.geometry"
        shipped = _shipped_profile(self.mock_profile_name) if self.simulated else None
        geometry = getattr(shipped, "geometry", None)
        if geometry is None:
            return None, ""
        return geometry, f"mock profile {self.mock_profile_name}"

    def time_scale(self) -> TimeScale:
        if not self.simulated:
            return TimeScale(value=1.0, source="real server")
        recorded = self.target.get("mock_time_scale")
        if isinstance(recorded, int | float) and recorded > 0:
            return TimeScale(value=float(recorded), source="manifest target.mock_time_scale")
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

    def load_shape(self) -> LoadShape | None:
        recorded = self.raw.get("load")
        if isinstance(recorded, dict) and recorded:
            return _shape_from_manifest(recorded, self.raw.get("prompts"))
        scn = self.scenario()
        if not scn:
            return None
        return _shape_from_scenario(scn, self.raw.get("prompts"))


def read_run_manifest(run_dir: Path | str) -> RunManifest:
    """The run's manifest; a one-line UsageError when it is missing or not JSON."""
    from kvbench.results import read_manifest

    run_dir = Path(run_dir)
    try:
        raw = read_manifest(run_dir)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{run_dir}: manifest.json is not JSON: {exc}") from None
    return RunManifest(raw, run_dir)


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


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _lengths_text(lengths: Any) -> str | None:
    if isinstance(lengths, list) and lengths:
        shown = ", ".join(f"{int(n):,}" for n in lengths[:8] if isinstance(n, int | float))
        return shown + (f", ... ({len(lengths)} lengths)" if len(lengths) > 8 else "")
    if isinstance(lengths, dict) and "min" in lengths and "max" in lengths:
        dist = lengths.get("distribution") or "uniform"
        return f"{int(lengths['min']):,}-{int(lengths['max']):,} ({dist})"
    return None


def _shape_from_manifest(load: dict[str, Any], prompts: Any) -> LoadShape:
    """results.schema.LoadShape's keys (kind, concurrency, rate, requests, prompt_count, lengths,
    max_tokens); for a rate load its `concurrency` is the cap on requests in flight."""
    prompts = prompts if isinstance(prompts, dict) else {}
    kind = load.get("kind")
    cap = load.get("max_concurrency") or (load.get("concurrency") if kind == "rate" else None)
    return LoadShape(
        kind=kind,
        concurrency=_int(load.get("concurrency")) if kind != "rate" else None,
        rate_per_s=load.get("rate") if isinstance(load.get("rate"), int | float) else None,
        arrivals=load.get("arrivals"),
        max_concurrency=_int(cap),
        requests=_int(load.get("requests")),
        prompt_count=_int(load.get("prompt_count") or load.get("prompts") or prompts.get("count")),
        lengths=load.get("lengths")
        if isinstance(load.get("lengths"), str)
        else _lengths_text(load.get("lengths")),
        shared_prefix_tokens=_int(load.get("shared_prefix_tokens")),
        max_tokens=_int(load.get("max_tokens")),
        source="manifest load",
    )


def _shape_from_scenario(scn: dict[str, Any], prompts_info: Any) -> LoadShape:
    load: dict[str, Any] = scn["load"] if isinstance(scn.get("load"), dict) else {}
    prompts: dict[str, Any] = scn["prompts"] if isinstance(scn.get("prompts"), dict) else {}
    built = prompts_info.get("count") if isinstance(prompts_info, dict) else None
    lengths = prompts.get("lengths")
    return LoadShape(
        kind=load.get("kind") or ("sequential" if "load" in scn else None),
        concurrency=_int(load.get("concurrency")),
        rate_per_s=load.get("rate") if isinstance(load.get("rate"), int | float) else None,
        arrivals=load.get("arrivals") if load.get("kind") == "rate" else None,
        max_concurrency=_int(load.get("max_concurrency")),
        requests=_int(load.get("requests")),
        prompt_count=_int(built)
        or _int(prompts.get("count"))
        or (len(lengths) if isinstance(lengths, list) else None),
        lengths=_lengths_text(lengths),
        shared_prefix_tokens=_int(prompts.get("shared_prefix_tokens")),
        max_tokens=_int((scn.get("output") or {}).get("max_tokens"))
        if isinstance(scn.get("output"), dict)
        else None,
        source=SCENARIO_FILE + (" and manifest prompts" if built is not None else ""),
    )
