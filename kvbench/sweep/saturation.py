"""Saturation of a load sweep: throughput no longer grows while latency does. Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoadPoint:
    """One point of a sweep in load order: the load, what it achieved, how long requests took."""

    load: float
    throughput: float | None
    latency: float | None


def saturation(points: list[LoadPoint], gain: float = 0.05, rise: float = 0.2) -> str | None:
    """Why the last point is past saturation, or None.

    It is when, against the point of highest throughput before it (at a lower load), its
    throughput grew by less than `gain` (relative) while its latency rose by more than `rise`:
    more load only queued. A point without figures says nothing."""
    if len(points) < 2:
        return None
    last = points[-1]
    earlier = [p for p in points[:-1] if p.throughput is not None and p.load < last.load]
    if last.throughput is None or last.latency is None or not earlier:
        return None
    best = max(earlier, key=lambda p: p.throughput or 0.0)
    if best.throughput is None or best.latency is None or best.throughput <= 0 or best.latency <= 0:
        return None
    grew = last.throughput / best.throughput - 1
    slower = last.latency / best.latency - 1
    if grew < gain and slower > rise:
        return (
            f"saturated at load {last.load:g}: throughput {last.throughput:.3g} req/s is "
            f"{grew:+.0%} against {best.throughput:.3g} at load {best.load:g} while latency "
            f"rose {slower:+.0%}"
        )
    return None
