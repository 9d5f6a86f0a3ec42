"""The run-directory contract: every saved run, of every manifest version, loads as the typed
Manifest through one reading path (results.reading) and renders; reading is tolerant of fields it
does not know, writing is strict; the README documents every field of the model."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from kvbench.errors import UsageError
from kvbench.results import MANIFEST_VERSION, load_manifest, load_record, load_run, read_manifest
from kvbench.results.reading import VERSIONS, detect_version, record_from_dict
from kvbench.results.schema import Label, Manifest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "fixture_runs"
# hand-built fixtures, plus real runs written by kvbench at a commit of each manifest version:
# 439297a (version 1, before the manifest was a model), 2efe139 (2), a4a0aac (3)
WRITTEN = FIXTURES / "written-by-439297a"
WRITERS = sorted(FIXTURES.glob("written-by-*"))
RUNS = sorted(p for d in (FIXTURES, *WRITERS) for p in d.iterdir() if (p / "manifest.json").exists())


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_saved_runs_load_typed(run: Path) -> None:
    m = load_manifest(run)
    assert m.run_id == read_manifest(run)["run_id"]
    assert all(isinstance(p.label, Label) for p in m.phases)


def test_a_run_written_by_0_1_0_is_among_the_fixtures() -> None:
    # written by kvbench at 439297a (`kvbench run ttft`), before the manifest became a model
    written = [p for p in RUNS if p.parent == WRITTEN]
    assert {load_manifest(p).test for p in written} == {"ttft", "throughput"}


def test_round_trip_is_lossless_for_written_keys() -> None:
    for run in RUNS:
        raw = read_manifest(run)
        again = load_manifest(run).to_json_dict()
        for key, value in raw.items():
            assert key in again, key
            if key not in ("phases", "target", "options"):
                assert again[key] == value or key == "ttft_steps", key


def test_unknown_keys_are_errors() -> None:
    raw = read_manifest(RUNS[0])
    with pytest.raises(ValidationError):
        Manifest.model_validate({**raw, "typo_field": 1})


def test_legacy_phase_label_reads_as_ttft() -> None:
    raw = read_manifest(FIXTURES / "20261130T140312Z-ttft-3f9a1c")
    assert raw["phases"][0]["label"] == "cold+warm"
    assert record_from_dict(raw).manifest.phases[0].label is Label.TTFT


def test_a_real_run_of_every_older_version_is_a_fixture() -> None:
    written = {detect_version(read_manifest(p)) for p in RUNS if p.parent in WRITERS}
    assert written == set(range(1, MANIFEST_VERSION)) and set(VERSIONS) == set(range(1, MANIFEST_VERSION + 1))


def _written_run(version: int) -> Path:
    return next(p for p in RUNS if p.parent in WRITERS and detect_version(read_manifest(p)) == version)


@pytest.mark.parametrize("version", range(1, MANIFEST_VERSION))
def test_a_run_of_each_older_version_loads_and_renders(tmp_path: Path, version: int) -> None:
    from kvbench.report.render import write_report

    run = tmp_path / _written_run(version).name
    shutil.copytree(_written_run(version), run)
    record = load_record(run)
    assert record.version_read == version and record.manifest.manifest_version == MANIFEST_VERSION
    assert record.manifest.load is not None  # version 1: from the saved scenario.yaml
    assert ("load: from scenario.yaml" in " ".join(record.notes)) == (version == 1)
    write_report(run, quiet=True)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run"]["run_id"] == run.name and summary["phases"]
    assert summary["run"]["load"]["kind"] == record.manifest.load.kind
    assert run.name in (run / "report.md").read_text()


def test_a_run_written_now_says_its_version() -> None:
    m = load_manifest(FIXTURES / "20261130T141500Z-throughput-7b2e90")
    assert m.to_json_dict()["manifest_version"] == MANIFEST_VERSION
    assert detect_version(m.to_json_dict()) == MANIFEST_VERSION


def test_unknown_fields_are_kept_and_warned_once(tmp_path: Path) -> None:
    run = tmp_path / "newer"
    shutil.copytree(_written_run(3), run)
    raw = read_manifest(run)
    raw |= {"manifest_version": MANIFEST_VERSION + 1, "energy_j": 12.5}
    raw["target"]["gpu"] = "H200"
    raw["phases"][0]["kv_hit_rate"] = 0.9
    (run / "manifest.json").write_text(json.dumps(raw))
    with pytest.warns(UserWarning, match="does not know") as caught:
        record = load_record(run)
    (message,) = [str(w.message) for w in caught]
    assert "manifest version 5, newer" in message and message.endswith(
        "target.gpu, phases[0].kv_hit_rate, energy_j"
    )
    assert dict(record.unknown) == {"energy_j": 12.5, "target.gpu": "H200", "phases[0].kv_hit_rate": 0.9}
    assert record.version_read == MANIFEST_VERSION + 1 and "newer kvbench" in record.notes[0]
    assert record.manifest.run_id == raw["run_id"] and record.manifest.target.model == raw["target"]["model"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_record(run)  # the same run again: no second warning
    from kvbench.report.summary import build_summary

    notes = build_summary(run)[0].notes  # the report says so too
    assert any(n.startswith("manifest: written by a newer kvbench") for n in notes)
    assert any("does not know (kept, not read): target.gpu" in n for n in notes)


def test_writing_stays_strict() -> None:
    m = load_manifest(RUNS[0])
    with pytest.raises(ValidationError):
        m.replace(energy_j=1.0)
    with pytest.raises(ValidationError):
        m.replace(target={**m.target.model_dump(), "gpu": "H200"})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("run_id"), "manifest.json: run_id: Field required"),
        (lambda m: m.update(status="paused"), "manifest.json: status: Input should be"),
        (
            lambda m: m["phases"][0].update(requests="many"),
            "manifest.json: phases.0.requests: Input should be",
        ),
    ],
)
def test_a_hand_made_manifest_that_does_not_fit_is_one_line(tmp_path: Path, edit, message: str) -> None:
    run = tmp_path / "hand-made"
    shutil.copytree(FIXTURES / "20261130T141500Z-throughput-7b2e90", run)
    raw = read_manifest(run)
    edit(raw)
    (run / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError) as exc:
        load_record(run)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_interrupted_and_killed_runs_load_through_the_same_path() -> None:
    from kvbench.report.summary import build_summary

    for name, status in [
        ("20261130T143000Z-throughput-interrupted-a1b2c3", "interrupted"),
        ("20261130T144000Z-ttft-dead01", "running"),
    ]:
        m = load_manifest(FIXTURES / name)
        assert m.status == status and m.phases[0].ended_ns is None
        summary, _, _ = build_summary(FIXTURES / name)
        assert summary.run.status == status and summary.run.status_text.startswith(
            "interrupted" if status == "interrupted" else "did not finish"
        )


def test_missing_or_broken_manifest_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no manifest\.json"):
        load_record(tmp_path)
    (tmp_path / "requests.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match=r"no manifest\.json"):
        load_run(tmp_path)  # rows without a manifest are not a run directory
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        load_record(tmp_path)


def test_manifest_is_frozen() -> None:
    m = load_manifest(RUNS[0])
    with pytest.raises(ValidationError):
        m.status = "failed"  # type: ignore[misc]
    assert m.replace(status="failed").status == "failed"


def _fields(model: type[BaseModel], seen: set[type]) -> set[str]:
    out: set[str] = set()
    if model in seen:
        return out
    seen.add(model)
    for name, info in model.model_fields.items():
        out.add(name)
        for sub in _models_in(info.annotation):
            out |= _fields(sub, seen)
    return out


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in getattr(annotation, "__args__", ()) for m in _models_in(a)]


def test_results_readme_documents_every_manifest_field() -> None:
    text = (ROOT / "results" / "README.md").read_text()
    section = text[text.index("## manifest.json") : text.index("## requests.jsonl")]
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", section))
    missing = sorted(_fields(Manifest, set()) - words)
    assert not missing, f"results/README.md does not document: {missing}"


def test_readme_lists_every_phase_label() -> None:
    text = (ROOT / "results" / "README.md").read_text()
    for label in Label:
        assert label.value in text, label


def test_fixture_json_is_valid() -> None:
    for run in RUNS:
        json.loads((run / "manifest.json").read_text())


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_an_older_runs_prompts_read_by_its_test(run: Path) -> None:
    """Runs written before prompts.role: their set is the load (no saved run is replay or sessions)."""
    m = load_manifest(run)
    assert m.prompts is None or m.prompts.role is None
    assert m.prompts_role() == (None if m.prompts is None else "load")


def test_an_older_replay_or_sessions_prompt_set_reads_as_the_probe() -> None:
    from kvbench.results.schema import PromptsInfo

    m = load_manifest(RUNS[0])
    old = PromptsInfo(count=1, build_s=0.0)  # as a run before prompts.role wrote it
    for test, role in (("replay", "probe"), ("sessions", "probe"), ("throughput", "load")):
        assert m.replace(test=test, prompts=old).prompts_role() == role
    # a recorded role wins over the inference
    assert (
        m.replace(test="replay", prompts=PromptsInfo(role="load", count=1, build_s=0.0)).prompts_role()
        == "load"
    )
