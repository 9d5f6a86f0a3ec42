"""A twin of the embedded mock: a ttft sweep on `ci`, `kvbench fit` on it, the same sweep on the twin.

The system here is the mock at the ttft scenario's pace (time_scale 0.1), so its modelled ground
truth is known: the twin's model must match it, and the twin's own run must reproduce the measured
TTFTs. Both read wall-clock TTFTs (the fit's input is what a user measures: a few ms of a busy
machine's timer and HTTP delay ride on each), so both are marked timing and the margins are wide.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile
from kvbench.results import load_run
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario
from kvbench.twin.build import build_twin
from kvbench.twin.sources import read_runs

pytestmark = [pytest.mark.slow, pytest.mark.timing]

LENGTHS = [4000, 16000, 32000]
PACE = 0.1  # the ttft scenario's mock_overrides on the ci profile


def _run(out: Path, **overrides) -> Path:
    scn, _ = load_scenario("ttft", {"prompts.lengths": LENGTHS, **overrides})
    outcome = asyncio.run(run_scenario(scn, RunOptions(output_dir=out, quiet=True, report=False)))
    assert outcome.status == "complete" and outcome.exit_code == 0
    return outcome.run_dir


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> tuple[Path, Path]:
    """(the system's ttft run on ci, the twin profile fitted to it)."""
    out = tmp_path_factory.mktemp("twin")
    real = _run(out, **{"target.mock_profile": "ci"})
    twin = build_twin(read_runs([real]), "ibm-g4", None, None)
    path = out / "my-twin.yaml"
    path.write_text(yaml.safe_dump(twin.profile, sort_keys=False), encoding="utf-8")
    return real, path


def test_twin_model_matches_the_systems_ground_truth(fitted) -> None:
    _, path = fitted
    twin = derive_params(load_profile(str(path)))
    truth = derive_params(load_profile("ci", {"time_scale": PACE}))
    fit = load_profile(str(path)).fit
    assert fit is not None and fit.valid["prompt_tokens_max"] == max(LENGTHS)
    fixed = fit.terms["prefill"]["fixed_s"]
    for n in LENGTHS:
        # real seconds: the twin runs at time_scale 1; the system's model seconds times its pace
        cold_truth, warm_truth = truth.cold_ttft_s(n) * PACE, truth.warm_ttft_s(n, "G4") * PACE
        # the fitted fixed cost holds the HTTP and timer overhead of one request (a few ms here)
        assert twin.cold_ttft_s(n) + fixed == pytest.approx(cold_truth, rel=0.2, abs=0.005)
        assert twin.warm_ttft_s(n, "G4") == pytest.approx(warm_truth, rel=0.4, abs=0.005)
    assert twin.cold_ttft_s(max(LENGTHS)) > 5 * twin.warm_ttft_s(max(LENGTHS), "G4")


def test_twin_reproduces_its_own_data(fitted, tmp_path: Path) -> None:
    real, path = fitted
    pred = _run(tmp_path, **{"target.mock_profile": str(path), "target.mock_overrides": {}})
    measured, predicted = load_run(real), load_run(pred)
    for label in ("cold", "warm"):
        for n in LENGTHS:

            def ttft(df, n=n, label=label) -> float:
                return float(df[(df.label == label) & (df.prompt_tokens_requested == n)].ttft_ms.median())

            # generous: single requests on a shared 2-core machine; the model terms are checked above
            assert ttft(predicted, n) == pytest.approx(ttft(measured, n), rel=0.35, abs=5.0), (label, n)
    from kvbench.report.summary import build_summary

    summary = build_summary(pred)[0]
    assert summary.banner is not None and summary.banner.startswith("PREDICTION from a twin fitted to")
