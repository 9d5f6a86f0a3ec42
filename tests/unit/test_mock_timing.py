"""The pure timing model: calibration, processor sharing, fabric noise, predictions."""

import pytest

from kvbench.mock.prediction import predict_closed_loop
from kvbench.mock.profiles import load_profile
from kvbench.mock.timing import (
    SharedResource,
    derive_params,
    fit_prefill,
    prefill_seconds,
    processor_sharing_finish_times,
)


@pytest.fixture(scope="module")
def g4():
    return derive_params(load_profile("ibm-g4"))


def test_prefill_formula_sums_linear_and_attention_work():
    a, b = 1e-4, 1e-8
    n, c = 1000, 400
    exact = sum(a + b * i for i in range(c, n))
    assert prefill_seconds(n, c, a, b) == pytest.approx(exact, rel=1e-3)
    assert prefill_seconds(n, n, a, b) == 0
    assert fit_prefill(
        (100, prefill_seconds(100, 0, a, b)), (900, prefill_seconds(900, 0, a, b))
    ) == pytest.approx((a, b))


@pytest.mark.parametrize(
    ("tokens", "cold_s", "warm_s"),
    [(30_000, 2.59, 0.193), (130_000, 32.14, 0.57)],
)
def test_ibm_g4_reproduces_its_calibration_points(g4, tokens, cold_s, warm_s):
    assert g4.cold_ttft_s(tokens) == pytest.approx(cold_s, rel=0.02)
    assert g4.warm_ttft_s(tokens, "G4") == pytest.approx(warm_s, rel=0.02)


def test_ibm_g4_fit_is_physical(g4):
    assert g4.prefill_a > 0 and g4.prefill_b > 0
    g4t = g4.tier("G4")
    assert 0 < g4t.latency_s < 0.193
    assert 1e9 < g4t.read_bandwidth < g4.fabric_capacity
    # 825 GB for 24 M tokens: the geometry without full-size sliding layers fits it
    assert g4.geometry.bytes_per_token(False) * 24e6 / 2**30 == pytest.approx(825, rel=0.01)


def test_ci_is_ibm_g4_scaled(g4):
    ci = derive_params(load_profile("ci"))
    assert ci.time_scale <= 0.01  # fast enough for CI, slow enough to dwarf HTTP overhead
    assert (ci.prefill_a, ci.prefill_b) == (g4.prefill_a, g4.prefill_b)
    assert ci.cold_ttft_s(130_000) / ci.warm_ttft_s(130_000) > 20


def test_two_simultaneous_transfers_each_take_twice_as_long():
    alone = processor_sharing_finish_times([(0.0, 10.0)], capacity=5.0)
    both = processor_sharing_finish_times([(0.0, 10.0), (0.0, 10.0)], capacity=5.0)
    assert alone == [pytest.approx(2.0)]
    assert both == [pytest.approx(4.0), pytest.approx(4.0)]
    # a later arrival shares only while it overlaps
    assert processor_sharing_finish_times([(0.0, 10.0), (1.0, 5.0)], 5.0) == [
        pytest.approx(3.0),
        pytest.approx(3.0),
    ]


def test_two_simultaneous_onboardings_from_one_tier():
    laptop = derive_params(load_profile("laptop"))
    nbytes = {"G3": laptop.kv_bytes(20_000)}
    one = laptop.onboard_s(nbytes, concurrent=1)
    two = laptop.onboard_s(nbytes, concurrent=2)
    assert two / one == pytest.approx(2.0, rel=0.05)


def test_per_transfer_cap_until_the_aggregate_is_shared():
    res = SharedResource(capacity=100.0, per_job_cap=10.0)
    for j in range(4):
        res.add(0.0, j, 10.0)
    assert res.rate() == 10.0  # 4 x 10 < 100: each runs at its own cap
    for j in range(4, 20):
        res.add(0.0, j, 10.0)
    assert res.rate() == pytest.approx(100.0 / 20)


def test_fabric_noise_slows_g4_onboarding(g4):
    c = g4.cacheable_tokens(130_000)
    moved = {"G4": g4.kv_bytes(c)}
    quiet = g4.onboard_s(moved, concurrent=28)
    noisy = g4.onboard_s(moved, concurrent=28, noise_bytes_per_s=60e9)
    assert noisy > 2 * quiet
    assert g4.warm_ttft_s(130_000, noise_bytes_per_s=200e9) > g4.warm_ttft_s(130_000)
    # the floor keeps G4 reads moving under any noise
    assert g4.fabric_available(1e15) == pytest.approx(g4.fabric_floor_fraction * g4.fabric_capacity)


def test_closed_loop_prediction_cached_beats_baseline(g4):
    cached = predict_closed_loop(g4, use_cache=True)
    baseline = predict_closed_loop(g4, use_cache=False)
    assert cached.requests == baseline.requests == 200
    assert cached.requests_per_s > baseline.requests_per_s
    # the GPU is shared, so 200 full prefills take about 200 x one prefill
    assert baseline.total_s == pytest.approx(200 * g4.prefill_s(120_000, 0), rel=0.05)
    noisy = predict_closed_loop(g4, use_cache=True, noise_bytes_per_s=200e9)
    assert noisy.total_s >= cached.total_s
    # with G4 filled beforehand, the run is bound by G4 reads, and noise on the fabric shows
    warm = predict_closed_loop(g4, warm_start=True)
    warm_noisy = predict_closed_loop(g4, warm_start=True, noise_bytes_per_s=40e9)
    assert warm.requests_per_s > 10 * cached.requests_per_s
    assert warm_noisy.total_s > 1.1 * warm.total_s
