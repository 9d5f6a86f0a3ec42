"""The offload-on-but-idle arm: each point run again (right after, arm A then arm B) against the
same server with offload off, so what offload costs when everything fits in GPU memory is
measured, not assumed.

Arm B is the point's scenario with `--baseline-url` as its base URL and `--baseline-set` on top;
`--baseline-offload-off` is the embedded mock's shorthand (its GPU prefix cache G1 on, tiers G2-G4
not caching: kvbench.mock.config.offload_off_overrides, merged into the point's own mock
overrides). The overhead is A over B minus one: of the measured TTFT p50
(bootstrap 95% interval, both runs resampled), and of the mock's modelled TTFT p50 (what its
model charges each request alone for the tokens it computed and the bytes it onboarded, per its
ground truth: free of this machine's load) where there is one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.configfile import Raw, parse_set
from kvbench.errors import UsageError
from kvbench.sweep.points import measured_rows, modelled_ttft
from kvbench.sweep.state import BaselinePlan


def baseline_plan(url: str | None, sets: list[str], offload_off: bool) -> BaselinePlan | None:
    """The second arm from its flags (None when none is given); the URL and values are checked
    where every point's arm-B scenario is (Sweep.check_all)."""
    if url is None and not sets and not offload_off:
        return None
    return BaselinePlan(url=url, sets=parse_set(sets, "--baseline-set"), offload_off=offload_off)


def baseline_overrides(baseline: BaselinePlan) -> dict[str, Any]:
    """What arm B sets on top of the point's own overrides (before the offload-off merge)."""
    out: dict[str, Any] = {k: Raw(v) for k, v in baseline.sets.items()}
    if baseline.url is not None:
        out["target.base_url"] = baseline.url
    return out


def offload_off_overrides(scn: Any) -> dict[str, Any]:
    """The embedded mock's overrides with G1 on and G2-G4 not caching; one line when there is no
    such mock."""
    if scn.target.base_url is not None:
        raise UsageError(
            "--baseline-offload-off: turns off the embedded mock's tiers; for a server give "
            "--baseline-url (the same server with offload off)"
        )
    from kvbench.mock.config import TieredProfile
    from kvbench.mock.config import offload_off_overrides as mock_offload_off
    from kvbench.mock.profiles import load_profile

    name = scn.target.mock_profile
    if not isinstance(load_profile(name), TieredProfile):
        raise UsageError(f"--baseline-offload-off: mock profile {name} has no cache tiers")
    return {"target.mock_overrides": {**scn.target.mock_overrides, **mock_offload_off()}}


def _ratio(a: list[float], b: list[float]) -> tuple[float | None, tuple[float, float] | None]:
    """median(a) / median(b) - 1 and its bootstrap interval (None with fewer than two a side)."""
    import numpy as np

    from kvbench.report.core.stats import bootstrap_ratio_ci

    if not a or not b:
        return None, None
    ma, mb = float(np.median(a)), float(np.median(b))
    if mb <= 0:
        return None, None
    ci = bootstrap_ratio_ci(a, b)
    return ma / mb - 1, (ci[0] - 1, ci[1] - 1) if ci is not None else None


def arm_overhead(dir_a: Path, dir_b: Path, label: str | None, params: tuple[Any, Any]) -> dict[str, Any]:
    """Offload's overhead at one point: arm A (offload on) against arm B (off), same label;
    `params` are the two arms' mock model parameters (None for a server)."""
    _, rows_a = measured_rows(dir_a, label)
    _, rows_b = measured_rows(dir_b, label)

    def ttft(rows: list[dict[str, Any]]) -> list[float]:
        return [float(r["ttft_ms"]) for r in rows if r.get("status") == "ok" and r.get("ttft_ms") is not None]

    measured, measured_ci = _ratio(ttft(rows_a), ttft(rows_b))
    modelled, modelled_ci = _ratio(
        modelled_ttft(dir_a, rows_a, params[0]), modelled_ttft(dir_b, rows_b, params[1])
    )
    return {
        "overhead_ttft_p50": measured,
        "overhead_ttft_p50_ci": measured_ci,
        "overhead_modelled_ttft_p50": modelled,
        "overhead_modelled_ttft_p50_ci": modelled_ci,
    }
