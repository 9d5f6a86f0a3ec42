"""The run-directory contract: every saved run loads as the typed Manifest, and the README
documents every field of the model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from kvbench.results import load_manifest, read_manifest
from kvbench.results.schema import Label, Manifest, PhaseEntry

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "fixture_runs"
# hand-built fixtures, plus real runs written by kvbench at 439297a (before the manifest was a model)
WRITTEN = FIXTURES / "written-by-439297a"
RUNS = sorted(p for d in (FIXTURES, WRITTEN) for p in d.iterdir() if (p / "manifest.json").exists())


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
    e = PhaseEntry.model_validate(
        {"name": "ttft", "label": "cold+warm", "repetition": 0, "started_ns": 0, "requests": 0, "errors": 0}
    )
    assert e.label is Label.TTFT


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
