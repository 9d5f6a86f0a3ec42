"""Where a run on a twin (a profile written by `kvbench fit`) goes beyond what the twin was fitted to.

A twin's terms hold over the prompt lengths, cached prefixes and concurrency of the runs it was
fitted to (its profile's `fit.valid`); outside them a prediction is an extrapolation. Every measured
request outside a range is counted, and the report says "predicted" with the error its validation
found (`kvbench fit --validate`, the profile's `fit.validation`), or that it was never validated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from kvbench.report.core.formats import Section, Table, fmt

NOT_MEASURED = frozenset({"probe", "fill", "filler", "prime"})


class RangeExcess(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    what: str = Field(description="The quantity: prompt tokens, cached tokens or connections.")
    fitted: str = Field(description="The range the twin was fitted over.")
    seen: str = Field(description="What this run used beyond it.")
    requests: int = Field(description="Measured requests outside the range (connections: every request).")


class TwinPrediction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fitted_to: list[str] = Field(description="The run directories the twin was fitted to.")
    source: dict[str, str | float | None] = Field(description="The system the twin stands for.")
    outside: list[RangeExcess] = Field(description="Each range this run left, with the requests beyond it.")
    expected_error: dict[str, float] = Field(
        description="Per metric, the largest |error| % its validation found (empty: never validated)."
    )


def _tokens(df: pd.DataFrame) -> pd.Series:
    """Prompt tokens as the server counted them, else as the client did."""
    server, client = df.get("prompt_tokens_server"), df.get("prompt_tokens")
    if server is None:
        return client.dropna() if client is not None else pd.Series(dtype=float)
    return (server.fillna(client) if client is not None else server).dropna()


def _excess(what: str, values: pd.Series, lo: Any, hi: Any) -> RangeExcess | None:
    if values.empty or lo is None or hi is None:
        return None
    out = values[(values < lo) | (values > hi)]
    if out.empty:
        return None
    seen = f"{int(out.min()):,}-{int(out.max()):,}"
    return RangeExcess(what=what, fitted=f"{int(lo):,}-{int(hi):,}", seen=seen, requests=len(out))


def expected_error(validation: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The worst |error| per metric over a twin's validation rows."""
    worst: dict[str, float] = {}
    for row in validation:
        err, metric = row.get("error_pct"), row.get("metric")
        if row.get("other_system"):  # a run of another system says nothing of the twin's error
            continue
        if isinstance(err, int | float) and isinstance(metric, str):
            worst[metric] = max(worst.get(metric, 0.0), abs(float(err)))
    return worst


def twin_prediction(fit: Any, df: pd.DataFrame, concurrency: int | None) -> TwinPrediction | None:
    """The run's range check against the twin's `fit` record (None: the profile is not a twin)."""
    if fit is None:
        return None
    rows = df[(df["status"] == "ok") & ~df["label"].isin(NOT_MEASURED)] if not df.empty else df
    valid = fit.valid
    found = [
        _excess(
            "prompt tokens", _tokens(rows), valid.get("prompt_tokens_min"), valid.get("prompt_tokens_max")
        ),
    ]
    if "cached_tokens" in rows and valid.get("cached_tokens_max") is not None:
        cached = rows["cached_tokens"].dropna()
        found.append(_excess("cached tokens", cached[cached > 0], 0, valid.get("cached_tokens_max")))
    most = valid.get("concurrency_max")
    if concurrency and most and concurrency > most:
        found.append(
            RangeExcess(what="connections", fitted=f"1-{most}", seen=str(concurrency), requests=len(rows))
        )
    return TwinPrediction(
        fitted_to=list(fit.runs),
        source=dict(getattr(fit, "source", {}) or {}),
        outside=[f for f in found if f is not None],
        expected_error=expected_error(getattr(fit, "validation", []) or []),
    )


def warning_lines(pred: TwinPrediction) -> list[str]:
    """One line per range left, and what the figures are: for the console and the notes."""
    lines = [
        f"twin range: {e.requests} request(s) at {e.what} {e.seen}, outside the fitted {e.fitted}: "
        "an extrapolation"
        for e in pred.outside
    ]
    if pred.expected_error:
        errs = ", ".join(f"{m} ±{v:.0f}%" for m, v in pred.expected_error.items())
        lines.append(f"twin: predicted figures; its validation found errors up to {errs}")
    else:
        lines.append("twin: predicted figures, never validated (kvbench fit PROFILE --validate RUN...)")
    return lines


def twin_section(pred: TwinPrediction | None) -> Section | None:
    if pred is None:
        return None
    para = [
        f"These figures are predicted by a twin fitted to {', '.join(pred.fitted_to)}"
        + (f" ({pred.source.get('engine')}, {pred.source.get('machine')})" if pred.source else "")
        + ".",
        *[f"- {line}" for line in warning_lines(pred)],
    ]
    tables = []
    if pred.outside:
        head = ["quantity", "fitted range", "this run", "requests"]
        tables.append(Table(head, [[e.what, e.fitted, e.seen, fmt(e.requests)] for e in pred.outside]))
    return Section("Twin prediction and its range", para, tables)
