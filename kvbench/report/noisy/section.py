"""What a noisy-neighbour run tells the reader: the effect with its interval, where the time went,
and how much of the contended resource the noise took, as a report section and three console lines.

A null result and a large one are both findings only next to the phase's bottleneck, so the
section always shows the attribution beside the effect, and says in words when the noised
resource carried too little of the time for the noise to matter. Pure: a RunSummary in,
text out (the plots are in `noisy.plots`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvbench.report.core.formats import Section, Table, fmt, fmt_ci
from kvbench.report.noisy.attribution import COMPONENT_TEXT, PhaseAttribution, pooled_shares
from kvbench.report.noisy.effect import NoiseEffect
from kvbench.report.noisy.explain import NoiseExplanation

if TYPE_CHECKING:
    from kvbench.report.summary import RunSummary

OVERHEAD_SHARE = 0.2  # above this, the server's own overhead (not the modelled work) shapes the phase
COLD_NAME = "empty-cache variant (test.noisy.cache_start: cold): every phase starts from an empty cache"
FILLED_NAME = "published reading (test.noisy.cache_start: filled): every phase reads the same filled cache"


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    if signed:
        return f"{x:+,.0f}%" if abs(x) >= 100 else f"{x:+.1f}%"
    return f"{x:.0f}%" if x >= 1 or x == 0 else "<1%"


def _gbps(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x / 1e12:.3g} TB/s" if x >= 1e12 else f"{x / 1e9:.3g} GB/s"


def reading(summary: RunSummary) -> str | None:
    """Which noisy reading the run is, from the phases it ran (a fill phase = the filled reading)."""
    labels = {p.label for p in summary.phases}
    if "noisy" not in labels:
        return None
    return FILLED_NAME if "fill" in labels else COLD_NAME


def effect_line(e: NoiseEffect | None) -> str:
    if e is None:
        return "noise effect: n/a (no complete quiet/noisy pair)"
    if e.time_change_ci_pct is None:
        return f"noise effect: {e.sentence}"
    lo, hi = (_pct(v, signed=True) for v in e.time_change_ci_pct)
    rate = _pct(e.rate_change_pct, signed=True)
    verdict = {
        "slower": "distinguishable from zero",
        "faster": "distinguishable from zero (noisy faster)",
        "negligible": f"negligible (within {e.min_effect_pct:g}% of zero)",
        "none": "no distinguishable effect",
    }.get(e.verdict, e.verdict)
    order = "ABBA" if e.balanced else "unbalanced order"
    return (
        f"noise effect: {_pct(e.time_change_pct, True)} time per request (requests/s {rate}), "
        f"{100 * e.level:g}% CI {lo} to {hi} over {e.pairs} pairs ({order}): {verdict}"
    )


def _top(shares: dict[str, float], n: int = 3) -> str:
    best = sorted(shares.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {_pct(100 * v)}" for k, v in best if v > 0)


def bottleneck_line(x: NoiseExplanation | None, attribution: Sequence[PhaseAttribution]) -> str:
    quiet = [a for a in attribution if a.label == "quiet"]
    noisy = [a for a in attribution if a.label == "noisy"]
    if x is None or not quiet:
        return "bottleneck: n/a (no attribution of the quiet phases)"
    qs, ns = pooled_shares(quiet), pooled_shares(noisy)
    if x.quiet_share is None:
        return f"bottleneck: quiet {_top(qs)} ({x.source}); the share on the {x.resource} is unknown"
    tiers = "/".join(x.tiers)
    head = (
        f"bottleneck: onboarding from {tiers} ({x.resource} reads) took {_pct(100 * x.quiet_share)} "
        f"of quiet and {_pct(100 * (x.noisy_share or 0))} of noisy request time"
    )
    tail = f"; quiet top: {_top(qs)}" if qs else ""
    if x.could_matter is False:
        tail += ": too small a share for the noise to matter much"
    elif ns and x.noisy_share is not None:
        tail += f"; noisy top: {_top(ns)}"
    overhead = qs.get("server_other", 0.0) + qs.get("transport", 0.0)
    if overhead > OVERHEAD_SHARE:
        tail += (
            f"; server overhead and transport took {_pct(100 * overhead)} of quiet time, outside the "
            "model: the machine running the server limits the phase and dilutes the effect"
        )
    return head + tail + f" ({x.source})"


def noise_line(x: NoiseExplanation | None) -> str:
    if x is None or x.noise_bytes_per_s is None:
        return "noise achieved: not measured"
    where = f"the {x.noise_link}" if x.noise_link else f"the {x.resource}"
    line = f"noise achieved: {_gbps(x.noise_bytes_per_s)}"
    if x.noise_offered_bytes_per_s:
        flows = f" by {x.noise_flows} flows" if x.noise_flows else ""
        line += f" of {_gbps(x.noise_offered_bytes_per_s)} offered{flows}"
    line += f" on {where} ({x.noise_where}), "
    util = x.utilisation
    if x.capacity_bytes_per_s and util is not None:
        share = f"{util:.3g}x" if util >= 1.5 else _pct(100 * util)
        line += f"{share} of its {_gbps(x.capacity_bytes_per_s)} capacity"
        line += " (saturated)" if util >= 1 else ""
    else:
        line += "capacity unknown (set test.noisy.capacity_bytes_per_s)"
    if x.noisy_left_bytes_per_s is not None:
        line += (
            f"; cache reads were left {_gbps(x.noisy_left_bytes_per_s)} "
            f"(quiet: {_gbps(x.quiet_left_bytes_per_s)})"
        )
    if x.bandwidth_predicts_drop is False:
        names = ", ".join(m.split(" (")[0] for m in x.other_mechanisms)
        line += f": bandwidth alone predicts no slowdown (else: {names}; mock knobs fabric.contention.*)"
    return line


def console_lines(summary: RunSummary) -> list[str]:
    """The three lines a noisy run prints: effect with interval, bottleneck share, noise achieved."""
    if summary.noise is None and summary.noise_effect is None:
        return []
    return [
        effect_line(summary.noise_effect),
        bottleneck_line(summary.noise_explained, summary.attribution),
        noise_line(summary.noise_explained),
    ]


def attribution_table(attribution: Sequence[PhaseAttribution]) -> Table | None:
    """Per phase: request-seconds measured and the share of each component."""
    if not attribution:
        return None
    comps: list[str] = []
    for a in attribution:
        comps += [c for c in a.components_s if c not in comps]
    comps = [c for c in comps if any(a.shares.get(c, 0) >= 0.005 for a in attribution)]
    rows = [
        [a.phase, a.label, fmt(a.requests), fmt(a.measured_s)]
        + [_pct(100 * a.shares.get(c, 0.0)) for c in comps]
        for a in attribution
    ]
    caption = "; ".join(f"{c}: {COMPONENT_TEXT.get(c, c)}" for c in comps)
    return Table(["phase", "label", "requests", "request-s", *comps], rows, caption=caption)


def noise_section(summary: RunSummary) -> Section | None:
    """The noisy-neighbour section: effect and interval, bottleneck, noise achieved, per-pair table."""
    n, e, x = summary.noise, summary.noise_effect, summary.noise_explained
    if n is None and e is None:
        return None
    paras = []
    which = reading(summary)
    if which:
        other = "--noisy --empty-cache" if which == FILLED_NAME else "--noisy (without --empty-cache)"
        paras.append(f"Reading: {which}. The other reading is one flag away: {other}.")
    paras += [effect_line(e), bottleneck_line(x, summary.attribution), noise_line(x)]
    if x is not None:
        paras.append(x.sentence)
    if e is not None:
        paras.append(
            f"How the effect is read: {e.metric}; each pair's log ratio is one observation and the "
            f"interval is Student t over the pairs. Distinguishable means the interval excludes zero by "
            f"at least {e.min_effect_pct:g}% (test.noisy.min_effect_pct)."
        )
        if not e.balanced:
            paras.append(
                "The pairs are not order-balanced (an odd count, or a fixed order): a drift is not cancelled."
            )
    tables = []
    if n is not None:
        tables.append(
            Table(
                ["pooled effect", "definition", "value", "95% CI"],
                [
                    [
                        "drop in requests/s",
                        n.rate_drop_what,
                        f"{fmt(n.rate_drop_pct)}%",
                        fmt_ci(n.rate_drop_ci_pct),
                    ],
                    ["increase in total time", n.time_increase_what, f"{fmt(n.time_increase_pct)}%", "n/a"],
                ],
                caption="all quiet phases pooled against all noisy phases (the paired effect is the finding)",
            )
        )
        offered = x.noise_offered_bytes_per_s if x is not None else None
        achieved = x.noise_bytes_per_s if x is not None and x.noise_where.startswith("modelled") else None
        tables.append(
            Table(
                [
                    "side",
                    "requests/s (pooled)",
                    "total time (s)",
                    "competing traffic (GB/s, sent)",
                    "offered (GB/s, modelled)",
                    "achieved (GB/s, modelled)",
                ],
                [
                    ["quiet", fmt(n.quiet_requests_per_s), fmt(n.quiet_total_s), "0", "0", "0"],
                    [
                        "noisy",
                        fmt(n.noisy_requests_per_s),
                        fmt(n.noisy_total_s),
                        fmt(n.noise_mean_bytes_per_s / 1e9) if n.noise_mean_bytes_per_s else "n/a",
                        fmt(offered / 1e9) if offered else "n/a",
                        fmt(achieved / 1e9) if achieved else "n/a",
                    ],
                ],
                caption="sent: the real bytes the noise generator pushed (against the mock, a few per "
                "flow that confirm it; the model takes each flow's declared offered rate)",
            )
        )
    if e is not None:
        tables.append(
            Table(
                ["pair", "order", "quiet s/request", "noisy s/request", "change"],
                [
                    [
                        p.pair,
                        p.order,
                        fmt(p.quiet_s_per_request),
                        fmt(p.noisy_s_per_request),
                        _pct(p.change_pct, True),
                    ]
                    for p in e.per_pair
                ],
                caption="each pair's phases (time per ok request = phase wall time / ok requests)",
            )
        )
    table = attribution_table([a for a in summary.attribution if a.label in ("quiet", "noisy", "fill")])
    if table is not None:
        tables.append(table)
    return Section("Noisy neighbour: effect, bottleneck, noise achieved", paras, tables)
