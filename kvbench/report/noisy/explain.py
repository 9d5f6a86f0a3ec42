"""The noise's side of a noisy-neighbour run: what it competed for, and whether it could matter.

Which resource the noise competed for (tcp/iperf3 noise: the fabric, which G4 reads cross; fio:
storage, G3/G4 reads), the share of request time spent onboarding from the tiers behind it
(`attribution`), and how much of that resource the noise used (achieved bytes/s over the
resource's capacity, when known: the mock's ground truth states its fabric, a user states theirs
in `test.noisy.capacity_bytes_per_s`). When that share is small, the explanation says plainly that
the noise could not have mattered much, with the numbers. Offered and achieved are two numbers:
the mock models each noise flow at its offered rate and shares the links max-min fair per flow
(kvbench.model.topology), so what the noise achieves never exceeds a capacity. Where the noise
left the cache reads all the bandwidth they had without it, bandwidth alone predicts no slowdown:
the explanation says so and names what else could cost one (topology.OTHER_MECHANISMS, each a
mock knob). Pure: attributions in, a model out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from kvbench.model.topology import OTHER_MECHANISMS
from kvbench.report.noisy.attribution import COMPONENT_TEXT, PhaseAttribution, pooled_shares

# What each noise kind competes for, and the tiers whose reads cross that resource.
NOISE_RESOURCE: dict[str, tuple[str, tuple[str, ...]]] = {
    "tcp": ("fabric", ("G4",)),
    "iperf3": ("fabric", ("G4",)),
    "fio": ("storage", ("G3", "G4")),
}
SMALL_SHARE = 0.10  # below this share of request time, noise on the resource cannot matter much
LEFT_ALL = 0.99  # the noise left the cache reads at least this share of their quiet bandwidth: all of it


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoiseExplanation(_Model):
    resource: str = Field(description="what the noise competed for: fabric | storage | unknown")
    tiers: list[str] = Field(description="tiers whose reads cross that resource")
    source: str = Field(description="where the attribution comes from")
    quiet_share: float | None = Field(None, description="share of quiet request time onboarding from `tiers`")
    noisy_share: float | None = Field(None, description="share of noisy request time onboarding from `tiers`")
    quiet_bound_share: float | None = Field(
        None, description="share of quiet request time with the resource's link on the critical path"
    )
    noisy_bound_share: float | None = Field(
        None, description="share of noisy request time with the resource's link on the critical path"
    )
    quiet_top: str | None = Field(None, description="largest component of the quiet phases")
    noise_bytes_per_s: float | None = Field(None, description="noise achieved at the resource, B/s")
    noise_offered_bytes_per_s: float | None = Field(None, description="noise offered, B/s (mock: modelled)")
    noise_flows: int | None = Field(None, description="noise flows (mock)")
    noise_link: str | None = Field(None, description="the link the noise shared with the cache reads (mock)")
    noise_where: str = Field(description="how the achieved rate was measured")
    capacity_bytes_per_s: float | None = Field(None, description="the resource's capacity, B/s")
    utilisation: float | None = Field(None, description="noise_bytes_per_s / capacity_bytes_per_s")
    quiet_left_bytes_per_s: float | None = Field(None, description="bandwidth the quiet reads could use")
    noisy_left_bytes_per_s: float | None = Field(None, description="bandwidth the noise left the reads")
    could_matter: bool | None = Field(
        None, description="False when the quiet share is below SMALL_SHARE: the noise could not matter much"
    )
    bandwidth_predicts_drop: bool | None = Field(
        None,
        description="False when the noise left the cache reads all the bandwidth they had quiet: "
        "bandwidth alone predicts no slowdown",
    )
    other_mechanisms: list[str] = Field(
        default_factory=list,
        description="what else could cost a slowdown, each with the mock knob that models it "
        "(when bandwidth alone predicts none)",
    )
    sentence: str = Field(description="the explanation in words, with the numbers")


def _pooled_links(phases: Sequence[PhaseAttribution]) -> dict[str, float]:
    total = sum(p.measured_s for p in phases)
    links: dict[str, float] = {}
    for p in phases:
        for k, v in p.links_s.items():
            links[k] = links.get(k, 0.0) + v
    return {k: v / total for k, v in links.items()} if total > 0 else {}


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else "<1%"


def _gbps(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x / 1e12:.3g} TB/s" if x >= 1e12 else f"{x / 1e9:.3g} GB/s"


def explain_noise(
    phases: Sequence[PhaseAttribution],
    noise_kind: str | None,
    sender_bytes_per_s: float | None = None,
    capacity_bytes_per_s: float | None = None,
    quiet: str = "quiet",
    noisy: str = "noisy",
) -> NoiseExplanation | None:
    """The bottleneck share and the noise's use of its resource, quiet vs noisy, in words.

    `sender_bytes_per_s`: what the noise generator reported (real bytes); used when the phases
    carry no measurement at the resource. `capacity_bytes_per_s`: the resource's capacity when the
    user stated it (the mock's ground truth carries its own).
    """
    q = [p for p in phases if p.label == quiet]
    n = [p for p in phases if p.label == noisy]
    if not q or not n:
        return None
    resource, tiers = NOISE_RESOURCE.get(noise_kind or "", ("unknown", ()))
    sources = sorted({p.source for p in (*q, *n)})
    source = ", ".join(sources)
    qs, ns = pooled_shares(q), pooled_shares(n)
    # a share is known only where onboarding is timed apart: the mock's ground truth, or counters
    # that name it (vLLM times KV loads inside prefill; llama.cpp's counters have no onboarding)
    known = bool(tiers) and all(
        p.source == "mock ground truth" or any(k.startswith("onboard_") for k in p.components_s)
        for p in (*q, *n)
    )
    q_share = sum(qs.get(f"onboard_{t}", 0.0) for t in tiers) if known else None
    n_share = sum(ns.get(f"onboard_{t}", 0.0) for t in tiers) if known else None
    link = {"fabric": "fabric", "storage": "disk"}.get(resource)
    has_links = link is not None and all(p.links_s for p in (*q, *n))
    q_bound = _pooled_links(q).get(link or "", 0.0) if has_links else None
    n_bound = _pooled_links(n).get(link or "", 0.0) if has_links else None
    top = max(qs, key=lambda k: qs[k]) if qs else None
    at_resource = [p.noise_bytes_per_s for p in n if p.noise_bytes_per_s]
    caps = [p.capacity_bytes_per_s for p in (*q, *n) if p.capacity_bytes_per_s]
    if at_resource:
        rate: float | None = sum(at_resource) / len(at_resource)
        where = "modelled, as the mock's requests saw it"
    else:
        rate = sender_bytes_per_s
        where = "as sent by the noise generator" if rate else "not measured"
    cap = caps[0] if caps else capacity_bytes_per_s
    q_left = [p.left_bytes_per_s for p in q if p.left_bytes_per_s]
    n_left = [p.left_bytes_per_s for p in n if p.left_bytes_per_s]
    q_left_mean = sum(q_left) / len(q_left) if q_left else None
    n_left_mean = sum(n_left) / len(n_left) if n_left else None
    util = rate / cap if rate is not None and cap else None
    could = None if q_share is None else q_share >= SMALL_SHARE
    offered = [p.noise_offered_bytes_per_s for p in n if p.noise_offered_bytes_per_s]
    predicts = None
    if q_left_mean and n_left_mean is not None:
        predicts = n_left_mean < LEFT_ALL * q_left_mean
    others = [f"{name} ({knob})" for name, knob, _ in OTHER_MECHANISMS] if predicts is False else []
    link = next((p.noise_link for p in n if p.noise_link), None)
    sentence = _sentence(resource, tiers, q_share, n_share, q_bound, top, qs, rate, cap, util)
    if link:  # the mock names the link of its topology the noise shared with the reads
        sentence = sentence.replace(
            f"The noise reached {_gbps(rate)} on the {resource}",
            f"The noise reached {_gbps(rate)} on the {link}",
        )
    if predicts is False:
        sentence += (
            f" The noise left the cache reads all the bandwidth they had without it ({_gbps(n_left_mean)}): "
            "bandwidth alone predicts no slowdown. What else could cost one (mock knobs, off by default): "
            + "; ".join(f"{name} ({knob}): {what}" for name, knob, what in OTHER_MECHANISMS)
            + "."
        )
    return NoiseExplanation(
        resource=resource,
        tiers=list(tiers),
        source=source,
        quiet_share=q_share,
        noisy_share=n_share,
        quiet_bound_share=q_bound,
        noisy_bound_share=n_bound,
        quiet_top=top,
        noise_bytes_per_s=rate,
        noise_offered_bytes_per_s=sum(offered) / len(offered) if offered else None,
        noise_flows=max((p.noise_flows or 0 for p in n), default=0) or None,
        noise_link=link,
        noise_where=where,
        capacity_bytes_per_s=cap,
        utilisation=util,
        quiet_left_bytes_per_s=q_left_mean,
        noisy_left_bytes_per_s=n_left_mean,
        could_matter=could,
        bandwidth_predicts_drop=predicts,
        other_mechanisms=others,
        sentence=sentence,
    )


def _sentence(
    resource: str,
    tiers: Sequence[str],
    q_share: float | None,
    n_share: float | None,
    q_bound: float | None,
    top: str | None,
    qs: Mapping[str, float],
    rate: float | None,
    cap: float | None,
    util: float | None,
) -> str:
    tier_txt = "/".join(tiers) or "?"
    parts = []
    if q_share is None:
        parts.append(
            f"The run cannot tell how much time the {resource} carried (no ground truth or counters "
            "that split onboarding), so a null or a large effect is not explained."
        )
    elif q_share < SMALL_SHARE:
        top_txt = f"{COMPONENT_TEXT.get(top or '', top)} {_pct(qs.get(top or ''))}" if top else "other work"
        parts.append(
            f"Without noise, onboarding from {tier_txt} (the reads that cross the {resource}) carried only "
            f"{_pct(q_share)} of the request time; {top_txt}: the noise could not have mattered much."
        )
    else:
        parts.append(
            f"Without noise, onboarding from {tier_txt} (the reads that cross the {resource}) carried "
            f"{_pct(q_share)} of the request time; with noise {_pct(n_share)}."
        )
        if q_bound is not None and q_share > 0:
            if q_bound >= 0.95 * q_share:
                parts.append(
                    f"The {resource} itself was the slowest stage of that onboarding: noise on it "
                    "slows the reads directly."
                )
            else:
                parts.append(
                    f"The {resource} itself was the slowest stage for only {_pct(q_bound)} of the quiet "
                    "time (the rest of the onboarding waited on another link): noise first uses its headroom."
                )
    if rate is not None:
        if cap and util is not None and util >= 1:
            capacity = f", {util:.3g}x its {_gbps(cap)} capacity: it saturated the {resource}"
        elif cap:
            capacity = f", {_pct(util)} of its {_gbps(cap)} capacity"
        else:
            capacity = " (capacity unknown)"
        parts.append(f"The noise reached {_gbps(rate)} on the {resource}{capacity}.")
    else:
        parts.append("The noise's rate was not measured.")
    return " ".join(parts)
