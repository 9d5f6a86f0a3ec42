"""kvbench.model: one prefill convention shared by the mock and the audit."""

import pytest

from kvbench.mock.costs import timing
from kvbench.model import prefill


def test_mock_and_audit_share_the_prefill_cost():
    a, b = timing.fit_prefill((30_000, 2.59), (130_000, 32.14))  # the mock's (a, b): b = attention slope
    a2, c = prefill.fit_prefill(30_000, 2.59, 130_000, 32.14)  # the model's t(n) = a n + c n^2
    assert a == pytest.approx(a2) and b == pytest.approx(2 * c)
    for n, k in ((130_000, 0), (130_000, 65_536), (30_000, 29_999)):
        assert timing.prefill_seconds(n, k, a, b) == pytest.approx(prefill.prefill_time(n, k, a2, c))
    assert prefill.prefill_time(130_000, 0, a2, c) == pytest.approx(32.14)
    half = prefill.prefill_time(100_000, 50_000, a2, c)
    assert prefill.suffix_time(a2, c, 100_000, 0.5) == pytest.approx(half)


def test_fit_needs_two_lengths():
    with pytest.raises(ValueError):
        prefill.fit_prefill(1000, 1.0, 1000, 2.0)
