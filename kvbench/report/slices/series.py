"""A run's samples as time series, and what a slice of one says: a counter's rise, a gauge's mean.

Pure numpy, no column names: kvbench.report.slices.frame builds its table from these. A sample row is the
sampler's (kvbench.telemetry.sampler): `t_ns` on the run's clock, `name`, `labels`, `value`; a row
with `error` is a failed scrape, never a sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvbench.engines.adapters import GaugeRef

if TYPE_CHECKING:
    import numpy as np

Key = tuple[str, tuple[tuple[str, str], ...]]


# --------------------------------------------------------------------------- series from rows


class SeriesAcc:
    """Samples gathered by name and labels as rows stream past (floats only: a row is not kept)."""

    def __init__(self) -> None:
        self.acc: dict[Key, tuple[list[float], list[float]]] = {}

    def add(self, r: Mapping[str, Any]) -> None:
        if r.get("error") is not None or r.get("name") is None or r.get("value") is None:
            return
        key = (str(r["name"]), tuple(sorted((str(k), str(v)) for k, v in (r.get("labels") or {}).items())))
        ts, vs = self.acc.setdefault(key, ([], []))
        ts.append(float(r["t_ns"]))
        vs.append(float(r["value"]))

    def done(self) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
        import numpy as np

        out = {}
        for key, (ts, vs) in self.acc.items():
            order = np.argsort(ts, kind="stable")
            out[key] = (np.asarray(ts)[order], np.asarray(vs)[order])
        return out


def series(rows: Iterable[Mapping[str, Any]]) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
    """Samples by name and labels, each (t_ns, value) sorted by time; error rows are left out."""
    acc = SeriesAcc()
    for r in rows:
        acc.add(r)
    return acc.done()


def labels_match(labels: tuple[tuple[str, str], ...], match: tuple[tuple[str, str], ...]) -> bool:
    have = {k: v.lower() for k, v in labels}
    return all(have.get(k) == v.lower() for k, v in match)


def counter_rise(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How much a cumulative counter rose in each slice between `edges` (ns); a reset counts from 0."""
    import numpy as np

    if t.size == 0:
        return np.zeros(edges.size - 1)
    steps = np.diff(v, prepend=v[0])
    steps = np.where(steps < 0, v, steps)  # the server restarted: it counted v since
    cumulative = np.cumsum(steps)
    at = np.interp(edges, t, cumulative)  # flat outside the samples: nothing seen, nothing counted
    return np.diff(at)


def gauge_mean(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of a gauge's samples in each slice (NaN where the slice has none)."""
    import numpy as np

    sums, _ = np.histogram(t, bins=edges, weights=v)
    counts, _ = np.histogram(t, bins=edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def rise_of(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]],
    name: str,
    edges: np.ndarray,
    match: tuple[tuple[str, str], ...] = (),
) -> np.ndarray | None:
    """Summed rise of every series of `name` whose labels carry `match`; None when there is none."""
    found = [
        counter_rise(t, v, edges)
        for (n, lab), (t, v) in data.items()
        if n == name and labels_match(lab, match)
    ]
    return sum(found[1:], found[0]) if found else None


def first_rise(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], names: Sequence[str], edges: np.ndarray
) -> np.ndarray | None:
    for name in names:
        got = rise_of(data, name, edges)
        if got is not None:
            return got
    return None


def first_gauge(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], refs: Sequence[GaugeRef], edges: np.ndarray
) -> tuple[np.ndarray, GaugeRef] | None:
    """Per slice, the sum over the series of the first gauge present of each one's mean in the slice."""
    import numpy as np

    for ref in refs:
        means = [
            gauge_mean(t, v, edges)
            for (n, lab), (t, v) in data.items()
            if n == ref.name and labels_match(lab, ref.match)
        ]
        if means:
            stack = np.vstack(means)
            seen = ~np.all(np.isnan(stack), axis=0)
            return np.where(seen, np.nansum(stack, axis=0), np.nan), ref
    return None


def mean_over(
    data: Mapping[Key, tuple[np.ndarray, np.ndarray]], name: str, edges: np.ndarray
) -> np.ndarray | None:
    """Per slice, the mean over the series of `name` (GPUs) of each one's mean in the slice."""
    import numpy as np

    means = [gauge_mean(t, v, edges) for (n, _), (t, v) in data.items() if n == name]
    if not means:
        return None
    stack = np.vstack(means)
    counts = (~np.isnan(stack)).sum(axis=0)
    return np.where(counts > 0, np.nansum(stack, axis=0) / np.maximum(counts, 1), np.nan)
