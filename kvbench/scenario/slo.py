"""A scenario's `slo:` section: latency bounds a request must meet to count toward goodput.

The same four names as `kvbench sweep --slo NAME=MS` (which overrides the section). A bound on a
metric the test cannot produce (an inter-token latency with one output token) is bad input,
checked with the rest of the scenario, not an empty column after the run.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from kvbench.scenario.sections import Strict

# SLO name -> (requests.jsonl column, percentile)
SLO_METRICS: dict[str, tuple[str, float]] = {
    "ttft_p50_ms": ("ttft_ms", 50.0),
    "ttft_p99_ms": ("ttft_ms", 99.0),
    "itl_p99_ms": ("itl_ms_mean", 99.0),
    "e2e_p99_ms": ("e2e_ms", 99.0),
}


class Slo(Strict):
    ttft_p50_ms: float | None = Field(None, gt=0, description="Bound on the median TTFT, in ms.")
    ttft_p99_ms: float | None = Field(None, gt=0, description="Bound on the p99 TTFT, in ms.")
    itl_p99_ms: float | None = Field(
        None, gt=0, description="Bound on the p99 of a request's mean inter-token latency, in ms."
    )
    e2e_p99_ms: float | None = Field(None, gt=0, description="Bound on the p99 end-to-end time, in ms.")

    @model_validator(mode="after")
    def _some(self) -> Slo:
        if not self.bounds():
            raise ValueError(f"an slo section needs at least one bound ({', '.join(SLO_METRICS)})")
        return self

    def bounds(self) -> dict[str, float]:
        """Name -> milliseconds of the bounds given."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def slo_problem(bounds: dict[str, float], max_tokens: int, where: str) -> str | None:
    """Why these bounds cannot be judged on this test's requests (None when they can)."""
    if any(k.startswith("itl") for k in bounds) and max_tokens < 2:
        return (
            f"{where} itl_p99_ms: output.max_tokens is {max_tokens}, so no request has an "
            "inter-token latency (set output.max_tokens to 2 or more)"
        )
    return None
