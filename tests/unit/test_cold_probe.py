"""The cold-start verdict (#13 item 4): both probes must answer before a reset counts as verified."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvbench.run.preflight.cold import cold_probe_verdict


@dataclass
class Probe:
    ok: bool = True
    error_type: str | None = None
    error_message: str | None = None
    cached_tokens: int | None = 0


FAILED = Probe(ok=False, error_type="http_503", error_message="Service Unavailable", cached_tokens=None)


@pytest.mark.parametrize(
    ("first", "second", "hits", "verified"),
    [
        (Probe(), Probe(cached_tokens=0), None, True),
        (Probe(), Probe(cached_tokens=None), 0.0, True),  # no cached_tokens: the hit counter decides
        (Probe(), Probe(cached_tokens=480), 480.0, False),  # the reset did nothing
        (Probe(), Probe(cached_tokens=None), 16.0, False),
        (Probe(), Probe(cached_tokens=None), None, None),  # nothing to read
        (FAILED, Probe(cached_tokens=0), 0.0, None),  # a failed first probe cached nothing
        (Probe(), FAILED, 0.0, None),  # a failed second probe shows nothing (hit delta 0 too)
        (FAILED, FAILED, 0.0, None),  # every request 503: was "verified" before
    ],
)
def test_verdict(first, second, hits, verified):
    got, detail = cold_probe_verdict(first, second, hits)
    assert got is verified
    if not first.ok or not second.ok:
        assert "http_503" in detail and "probe failed" in detail and "both probes" in detail
    if verified is False:
        assert "cached_tokens" in detail
