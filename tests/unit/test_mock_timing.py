"""The pure timing model: calibration, processor sharing, noise on the topology, predictions."""

from dataclasses import replace

import pytest

from kvbench.mock.costs.prediction import predict_closed_loop
from kvbench.mock.costs.timing import (
    SharedResource,
    derive_params,
    fit_prefill,
    prefill_seconds,
    processor_sharing_finish_times,
)
from kvbench.mock.profiles import load_profile


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
    assert 1e9 < g4t.read_bandwidth < g4.topology.cache_bandwidth == 80e9
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


PUBLISHED_NOISE = [50e9] * 4  # 200 GB/s offered by 4 clients


def test_published_noise_leaves_g4_reads_their_bandwidth(g4):
    """On the published topology the noise shares only the storage (315 GB/s) with the reads, and
    200 GB/s + the client's 80 GB/s fit: bandwidth alone predicts no slowdown."""
    c = g4.cacheable_tokens(130_000)
    moved = {"G4": g4.kv_bytes(c)}
    assert g4.onboard_s(moved, 28, PUBLISHED_NOISE) == pytest.approx(g4.onboard_s(moved, 28))
    share = g4.g4_share(28, PUBLISHED_NOISE)
    assert share.noise_achieved == pytest.approx(200e9) and share.cache_total == pytest.approx(80e9)
    assert g4.noise_link == "storage_read" and g4.noise_link_capacity == 315e9


def test_noise_achieves_at_most_a_capacity_and_slows_reads_only_past_their_fair_share(g4):
    c = g4.cacheable_tokens(130_000)
    moved = {"G4": g4.kv_bytes(c)}
    huge = [1e15] * 4  # offered far beyond any link
    share = g4.g4_share(28, huge)
    assert share.noise_achieved <= g4.noise_link_capacity * (1 + 1e-9)
    assert all(load <= g4.topology.capacity(n) * (1 + 1e-9) for n, load in share.link_load.items())
    # 4 flows beside 28 reads of 80/28 GB/s each: fair share 315/32 > 80/28, the reads keep theirs
    assert share.cache_total == pytest.approx(80e9)
    # beside 400 noise flows the fair share (315/428 GB/s) is below what each read asks: slower
    crowd = [1e15] * 400
    assert g4.onboard_s(moved, 28, crowd) > 2 * g4.onboard_s(moved, 28)


def test_laptop_noise_shares_its_one_link(tmp_path):
    laptop = derive_params(load_profile("laptop"))
    assert laptop.noise_link == "fabric" and laptop.noise_link_capacity == 1.25e9
    one = laptop.g4_share(1, [10e9])
    assert one.cache_each == pytest.approx(1.25e9 / 2) and one.noise_achieved == pytest.approx(1.25e9 / 2)


@pytest.mark.parametrize(
    "knob", [{"loaded_latency_s": 0.5}, {"storage_cpu_slowdown": 0.6}, {"incast_loss": 0.9}]
)
def test_each_contention_knob_is_off_by_default_and_slows_noisy_reads(g4, knob):
    from kvbench.model.topology import Contention

    assert not g4.contention.active
    c = g4.cacheable_tokens(130_000)
    moved = {"G4": g4.kv_bytes(c)}
    on = replace(g4, contention=Contention(**knob))
    # incast cuts the client link: it shows once many reads fill it (past PCIe's 50 GB/s)
    concurrent = 28 if "incast_loss" in knob else 1
    assert on.onboard_s(moved, concurrent) == pytest.approx(g4.onboard_s(moved, concurrent))  # quiet
    assert on.onboard_s(moved, concurrent, PUBLISHED_NOISE) > 1.1 * g4.onboard_s(moved, concurrent)


def test_closed_loop_prediction_cached_beats_baseline(g4):
    cached = predict_closed_loop(g4, use_cache=True)
    baseline = predict_closed_loop(g4, use_cache=False)
    assert cached.requests == baseline.requests == 200
    assert cached.requests_per_s > baseline.requests_per_s
    # the GPU is shared, so 200 full prefills take about 200 x one prefill
    assert baseline.total_s == pytest.approx(200 * g4.prefill_s(120_000, 0), rel=0.05)
    noisy = predict_closed_loop(g4, use_cache=True, noise=PUBLISHED_NOISE)
    assert noisy.total_s == pytest.approx(cached.total_s)  # the published noise fits the topology
    # with G4 filled beforehand, noise shows only where it takes the reads' share: 400 flows
    warm = predict_closed_loop(g4, warm_start=True)
    warm_noisy = predict_closed_loop(g4, warm_start=True, noise=[1e12] * 400)
    assert warm.requests_per_s > 10 * cached.requests_per_s
    assert warm_noisy.total_s > 1.1 * warm.total_s
