"""kvbench fit on synthetic runs from known coefficients: the fit recovers them; bad input is one line."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import yaml

from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile
from kvbench.model.kv_geometry import PRESETS
from kvbench.model.prefill import prefill_time
from kvbench.twin import fit as F
from kvbench.twin.build import build_twin
from kvbench.twin.sources import read_runs

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixture_runs"
TTFT_FIXTURE = FIXTURES / "20261130T140312Z-ttft-3f9a1c"
THROUGHPUT_FIXTURE = FIXTURES / "20261130T141500Z-throughput-7b2e90"

# the system the synthetic runs come from (seconds, bytes/s): not any shipped profile's values
A, C, FIXED, LATENCY, BW, STEP = 2.0e-5, 3.0e-10, 0.004, 0.030, 4.0e9, 0.012
LENGTHS = [4000, 12000, 24000, 48000, 64000]
GEOMETRY = PRESETS["gpt-oss-120b"]  # the base profile's (ibm-g4)
G2_BW = 5.0e10  # ibm-g4's host->GPU copy, still above 10x BW: the twin keeps it


def _kv(tokens: int) -> float:
    return GEOMETRY.kv_bytes(tokens, False)


def _rows(noise: float, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    tail = _kv(256) / G2_BW  # one host->GPU chunk after the G4 read, as kvbench.mock.costs.timing charges
    rows = []
    for i, n in enumerate(LENGTHS):
        k = (n - 1) // 16 * 16
        cold = prefill_time(n, 0, A, C) + FIXED
        warm = FIXED + LATENCY + _kv(k) / BW + tail + prefill_time(n, k, A, C)
        for label, cached, ttft in (("cold", 0, cold), ("warm", k, warm)):
            rows.append(
                {
                    "request_id": f"r{i}-{label}",
                    "phase": "ttft",
                    "label": label,
                    "status": "ok",
                    "prompt_tokens_requested": n,
                    "prompt_tokens": n,
                    "prompt_tokens_server": n,
                    "cached_tokens": cached,
                    "output_tokens": 16,
                    "ttft_ms": ttft * (1 + noise * rng.gauss(0, 1)) * 1e3,
                    "itl_ms_mean": (STEP + _kv(n + 8) / 1.0e12) * 1e3,
                }
            )
    return rows


def _run_dir(tmp_path: Path, rows: list[dict], name: str = "run") -> Path:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(TTFT_FIXTURE / "manifest.json", d / "manifest.json")
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return d


def test_fit_recovers_known_coefficients_from_exact_rows(tmp_path: Path) -> None:
    twin = build_twin(read_runs([_run_dir(tmp_path, _rows(0.0))]), "ibm-g4", None, None)
    assert twin.prefill.a == pytest.approx(A, rel=1e-6)
    assert twin.prefill.c == pytest.approx(C, rel=1e-6)
    assert twin.prefill.fixed_s == pytest.approx(FIXED, rel=1e-6)
    assert twin.onboard is not None and twin.onboard.bandwidth_bytes_per_s is not None
    assert twin.onboard.latency_s == pytest.approx(LATENCY, rel=1e-5)
    assert twin.onboard.bandwidth_bytes_per_s == pytest.approx(BW, rel=1e-5)
    assert twin.decode is not None and twin.decode.base_s == pytest.approx(STEP, rel=1e-6)
    assert twin.prefill.quality.r2 == pytest.approx(1.0)
    # the profile says the same, and the mock accepts it: its G4 read is the fitted one
    params = derive_params(load_profile(_write(tmp_path, twin.profile)))
    assert params.prefill_b == pytest.approx(2 * C, rel=1e-6)
    assert params.tier("G4").read_bandwidth == pytest.approx(BW, rel=1e-5)
    assert not params.tier("G1").enabled and params.tier("G4").enabled


def test_fit_within_tolerance_on_noisy_rows(tmp_path: Path) -> None:
    twin = build_twin(read_runs([_run_dir(tmp_path, _rows(0.01, seed=3))]), "ibm-g4", None, None)
    assert twin.onboard is not None and twin.onboard.bandwidth_bytes_per_s is not None
    # 1% noise per point: the model's predictions (not each coefficient) are what must hold
    for n in LENGTHS:
        fitted = prefill_time(n, 0, twin.prefill.a, twin.prefill.c) + twin.prefill.fixed_s
        assert fitted == pytest.approx(prefill_time(n, 0, A, C) + FIXED, rel=0.03)
    assert twin.onboard.bandwidth_bytes_per_s == pytest.approx(BW, rel=0.15)
    assert twin.prefill.quality.r2 > 0.99
    assert twin.prefill.quality.points == len(LENGTHS)


def _write(tmp_path: Path, profile: dict) -> str:
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(profile), encoding="utf-8")
    return str(path)


def test_fit_section_records_quality_and_ranges(tmp_path: Path) -> None:
    twin = build_twin(read_runs([_run_dir(tmp_path, _rows(0.0))]), "ibm-g4", None, None)
    fit = load_profile(_write(tmp_path, twin.profile)).fit
    assert fit is not None
    assert fit.valid["prompt_tokens_min"] == min(LENGTHS) and fit.valid["prompt_tokens_max"] == max(LENGTHS)
    assert fit.valid["cached_tokens_max"] == (max(LENGTHS) - 1) // 16 * 16
    assert fit.terms["prefill"]["points"] == len(LENGTHS)
    assert fit.terms["onboard"]["r2"] == pytest.approx(1.0)
    assert any("fixed cost" in n for n in fit.notes)


def test_two_lengths_use_the_two_point_fit() -> None:
    n = [30000, 130000]
    t = [prefill_time(x, 0, A, C) for x in n]
    got = F.fit_cold(n, t)
    assert got.method.startswith("two-point")
    assert (got.a, got.c, got.fixed_s) == (pytest.approx(A), pytest.approx(C), 0.0)


def test_negative_coefficients_are_dropped_not_kept() -> None:
    # TTFT that falls with length: no non-negative slope explains it, so only the constant is kept
    got = F.nonneg_lstsq({"a": [1.0, 2.0, 3.0], "f": [1.0, 1.0, 1.0]}, [3.0, 2.0, 1.0])
    assert got.coef["a"] == 0.0 and got.coef["f"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="two distinct prompt lengths"):
        F.fit_cold([1000, 1000], [0.1, 0.11])


def test_fit_command_writes_a_profile_the_mock_loads(capsys, tmp_path: Path) -> None:
    from kvbench.twin.commands import fit_cmd

    out = tmp_path / "mine.yaml"
    fit_cmd([_run_dir(tmp_path, _rows(0.0))], out, "ibm-g4", None)
    stdout = capsys.readouterr().out
    assert "R^2" in stdout and "valid for prompts 4000-64000 tokens" in stdout
    profile = load_profile(str(out))
    assert profile.fit is not None and profile.name == str(out.resolve())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["fit", str(THROUGHPUT_FIXTURE)], "no cold TTFT rows"),
        (["fit", "/nonexistent/run"], "no such run directory"),
        (["run", "ttft", "--mock-profile", "./no-such-twin.yaml"], "no such profile file"),
    ],
)
def test_bad_input_is_one_line_exit_2(run_cli, args: list[str], needle: str) -> None:
    code, _, err = run_cli(*args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_invalid_profile_file_names_the_file(run_cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: tiered\nname: x\n", encoding="utf-8")
    code, _, err = run_cli("run", "ttft", "--mock-profile", str(bad))
    assert code == 2 and str(bad) in err and len(err.strip().splitlines()) == 1


def test_fixed_cost_is_bounded_by_the_fastest_warm_request() -> None:
    # one slow cold request at the shortest length would make f most of every TTFT; the median of
    # each length's repetitions and the warm bound keep the prefill terms
    tokens = [1000, 1000, 1000, 2000, 2000, 2000, 4000, 4000, 4000]
    ttft = [prefill_time(n, 0, A, C) + FIXED for n in tokens]
    ttft[0] *= 20
    got = F.fit_cold(tokens, ttft, fixed_max=FIXED)
    assert got.a == pytest.approx(A, rel=1e-6) and got.c == pytest.approx(C, rel=1e-6)
    slow = F.fit_cold([1000, 2000, 4000], [ttft[0], ttft[3], ttft[6]], fixed_max=0.01)
    assert slow.fixed_s <= 0.01 and "held at the fastest warm TTFT" in slow.method


def test_block_size_is_read_from_the_cached_counts() -> None:
    from kvbench.twin.build import infer_block

    assert infer_block([1023, 2047, 4095], 16) == 1  # llama.cpp: every token but the last
    assert infer_block([1984, 7984, 15984], 64) == 16  # whole 16-token blocks
    assert infer_block([4096], 16) == 16 and infer_block([], 32) == 32  # one length cannot tell


def test_compare_gives_each_later_runs_relative_error(tmp_path: Path) -> None:
    from kvbench.report.compare import error_table
    from kvbench.report.summary import build_summary

    slow = _run_dir(tmp_path, _rows(0.0), "real")
    fast = _run_dir(tmp_path, [r | {"ttft_ms": r["ttft_ms"] * 0.8} for r in _rows(0.0)], "twin")
    table = error_table(["real", "twin"], [build_summary(slow)[0], build_summary(fast)[0]])
    by_metric = {row[1]: row[4] for row in table.rows}
    assert by_metric[f"cold TTFT p50 at {LENGTHS[0]} tokens (ms)"] == "-20.0%"
    assert by_metric["warm: TTFT p50 (ms)"] == "-20.0%"


def test_a_what_if_on_the_serving_tier_bandwidth_takes_effect(tmp_path: Path) -> None:
    twin = build_twin(read_runs([_run_dir(tmp_path, _rows(0.0))]), "ibm-g4", None, None)
    path = _write(tmp_path, twin.profile)
    now = derive_params(load_profile(path))
    doubled = derive_params(load_profile(path, {"tiers.G4.read_bandwidth_bytes_per_s": 2 * BW}))
    n = max(LENGTHS)
    saved = now.kv_bytes(now.cacheable_tokens(n)) / (2 * BW)  # half the read time
    assert now.warm_ttft_s(n) - doubled.warm_ttft_s(n) == pytest.approx(saved, rel=1e-3)


def test_throughput_runs_are_recorded_beside_the_ttft_fit(tmp_path: Path) -> None:
    runs = read_runs([_run_dir(tmp_path, _rows(0.0)), THROUGHPUT_FIXTURE])
    twin = build_twin(runs, "ibm-g4", None, None)
    fit = load_profile(_write(tmp_path, twin.profile)).fit
    assert fit is not None
    observed = {o["label"]: o for o in fit.observed_throughput}
    assert set(observed) == {"baseline", "cached"}
    assert observed["cached"]["requests_per_s"] > observed["baseline"]["requests_per_s"] > 0
    assert any("throughput rows are recorded, not fitted" in n for n in fit.notes)
    assert twin.prefill.a == pytest.approx(A, rel=1e-6)  # the throughput rows do not enter the TTFT fit


def test_a_cliff_gives_the_twin_a_near_tier_of_its_capacity_and_the_far_tier_in_g4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvbench.twin import tiers

    far = F.OnboardFit(0.006, 2.0e9, F.quality([1.0, 2.0], [1.0, 2.0]))
    seen: list[int] = []

    def cliff(runs, block, kv_bytes, one_tier, tail_s):  # type: ignore[no-untyped-def]
        seen.append(sum(len(r) for r in runs))
        return tiers.Cliff(700, far, 1e-6, 1e-4, 20, 5)

    monkeypatch.setattr(tiers, "fit_cliff", cliff)
    runs = read_runs([_run_dir(tmp_path, _rows(0.0)), THROUGHPUT_FIXTURE])
    twin = build_twin(runs, "ibm-g4", None, None)
    assert seen and seen[0] > len(_rows(0.0))  # the sweep's rows and the throughput run's
    params = derive_params(load_profile(_write(tmp_path, twin.profile)))
    assert params.tier("G1").enabled and params.capacity_blocks("G1") == 700
    assert (params.tier("G4").latency_s, params.tier("G4").read_bandwidth) == (0.006, 2.0e9)
    assert twin.profile["fit"]["terms"]["near_tier"]["capacity_blocks"] == 700
    assert any("a cliff in the hits" in n for n in twin.notes)
    # without throughput runs no cliff is looked for: G4 is the sweep's serving tier, G1 off
    alone = build_twin(read_runs([_run_dir(tmp_path, _rows(0.0), "alone")]), "ibm-g4", None, None)
    assert not alone.profile["tiers"]["G1"]["enabled"] and "near_tier" not in alone.profile["fit"]["terms"]
