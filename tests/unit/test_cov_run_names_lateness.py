"""Small run-side checks: the mock's own lateness written into the manifest (kvbench.run.
mock_lateness_record) from a run's rows and the mock's ground truth; names no registry knows
(kvbench.run.preflight.names) refused in one line; which load backend `load.workers` gets."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from kvbench.errors import UsageError
from kvbench.load.backends import load_backend
from kvbench.load.local_workers import LocalWorkersBackend
from kvbench.results import read_manifest
from kvbench.run.context import RunOptions
from kvbench.run.mock_lateness_record import record_mock_lateness
from kvbench.run.preflight.names import check_names
from kvbench.run.preflight.target import TargetInfo
from kvbench.run.runner import start_manifest
from kvbench.scenario import Scenario, load_scenario


def lateness_run(tmp_path: Path, kind: str, phases: dict[str, list[tuple[float, float]]]) -> Any:
    """A run directory whose phases' requests each took (modelled TTFT ms, mock lateness ms)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    target = TargetInfo(kind=kind, base_url="http://m", model="m", engine="mock", api="completions")
    conn = types.SimpleNamespace(run_path=tmp_path, run_id="20261206T000000Z-l-abc123", target=target)
    rd = start_manifest(load_scenario("ttft")[0], RunOptions(quiet=True), conn, 0)  # type: ignore[arg-type]
    rows, truth = [], []
    for phase, reqs in phases.items():
        for i, (modelled, late) in enumerate(reqs):
            rid = f"{phase}-{i}"
            label = "probe" if phase == "probe" else "cached"
            rows.append({"request_id": rid, "phase": phase, "label": label})
            ttft_ns = int((modelled + late) * 1e6)
            truth.append(
                {
                    "request_id": rid,
                    "received_ns": 1000,
                    "first_token_ns": 1000 + ttft_ns,
                    "mock_late_ms": late,
                }
            )
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "mock_ground_truth.jsonl").write_text("".join(json.dumps(t) + "\n" for t in truth))
    return types.SimpleNamespace(target=target, rd=rd)


def test_a_phase_whose_lateness_passes_its_share_is_named_in_the_warning_and_manifest(tmp_path) -> None:
    run = lateness_run(
        tmp_path,
        "mock",
        {"probe": [(1.0, 5.0)], "quiet": [(100.0, 2.0), (100.0, 4.0)], "noisy": [(20.0, 5.0), (20.0, 7.0)]},
    )
    line = record_mock_lateness(run)
    ml = read_manifest(tmp_path)["mock_lateness"]
    by = {p["phase"]: p for p in ml["phases"]}
    assert by["quiet"]["share"] == pytest.approx(3.0 / 100.0) and not by["quiet"]["exceeded"]
    assert by["noisy"]["share"] == pytest.approx(6.0 / 20.0) and by["noisy"]["exceeded"]
    assert by["probe"]["exceeded"] is False  # a probe's lateness is not a measured phase's
    assert ml["exceeded_phases"] == ["noisy"] and by["noisy"]["late_ms_p99"] == 7.0
    assert line is not None and "in 1 phase(s) (noisy; worst noisy: 30%)" in line


def test_nothing_is_recorded_off_the_mock_or_without_ground_truth(tmp_path) -> None:
    server = lateness_run(tmp_path / "s", "server", {"quiet": [(10.0, 5.0)]})
    assert record_mock_lateness(server) is None and read_manifest(tmp_path / "s").get("mock_lateness") is None
    empty = lateness_run(tmp_path / "e", "mock", {})
    assert record_mock_lateness(empty) is None
    calm = lateness_run(tmp_path / "q", "mock", {"quiet": [(100.0, 1.0)]})
    assert (
        record_mock_lateness(calm) is None
        and read_manifest(tmp_path / "q")["mock_lateness"]["exceeded_phases"] == []
    )


def scenario(**sets: Any) -> Scenario:
    return load_scenario("throughput", sets)[0]


def test_an_unknown_mock_profile_is_one_line_with_the_known_names() -> None:
    from kvbench.mock.profiles import profile_names

    with pytest.raises(UsageError) as info:
        check_names(scenario(**{"target.mock_profile": "cii"}))
    assert (
        str(info.value)
        == f"target.mock_profile: unknown mock profile 'cii' (known: {', '.join(profile_names())})"
    )
    check_names(scenario())  # the shipped scenario's names are known


def test_a_noise_kind_no_backend_registers_is_refused_naming_the_cluster(monkeypatch) -> None:
    import kvbench.noise as noise

    # the scenario's own union knows every kind; a cluster's registry may hold fewer of them
    monkeypatch.setattr(noise, "noise_kinds", lambda cluster: ("none", "fio"))
    scn = scenario(**{"cluster.backend": "ray"})
    assert scn.noise.kind not in ("none", "fio")
    with pytest.raises(UsageError) as info:
        check_names(scn)
    assert (
        str(info.value)
        == f"noise.kind: unknown noise kind {scn.noise.kind!r} on cluster 'ray' (known: none, fio)"
    )


def test_a_bad_mock_override_names_the_overrides_field() -> None:
    with pytest.raises(UsageError, match=r"^target\.mock_overrides: ") as info:
        check_names(scenario(**{"target.mock_overrides": {"time_scale": "fast"}}))
    assert "\n" not in str(info.value)
    check_names(
        scenario(**{"target.base_url": "http://127.0.0.1:9", "target.mock_overrides": {"time_scale": "fast"}})
    )


def test_a_profile_file_that_does_not_exist_is_named(tmp_path) -> None:
    missing = tmp_path / "mine.yaml"
    with pytest.raises(UsageError, match=str(missing.name)):
        check_names(scenario(**{"target.mock_profile": str(missing)}))


def test_load_workers_without_a_ray_session_are_local_processes() -> None:
    backend = load_backend("ray", workers=3, placement="spread")
    assert isinstance(backend, LocalWorkersBackend) and backend.workers_wanted == 3
    procs = load_backend("processes", workers=2, pin=False, silence_s=30.0, unknown=1)
    assert isinstance(procs, LocalWorkersBackend) and procs.silence_s == 30.0
    assert load_backend().name == "local"
