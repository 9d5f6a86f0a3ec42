"""Where each phase's request time went: queueing, prefill, onboarding per tier, decode.

A noisy-neighbour result is only a finding next to the phase's bottleneck: noise on the fabric
cannot slow a phase whose requests spend their time computing prefills. This module splits the
request time of every phase (the sum over its ok requests of the client's end-to-end time, in
request-seconds) into named components, from the best source the run has:

mock ground truth (exact)
    The mock writes one line per request (mock_ground_truth.jsonl) with its admission wait,
    onboarding split by the tier the bytes came from (and by the link on the critical path:
    fabric, disk, pcie), prefill, and the times of its first and last token. Per request:
        queue + onboard_G2 + onboard_G3 + onboard_G4 + prefill + decode
          + server_other (server time outside the model: parsing, tokenizing, a late event loop)
          + transport    (client e2e - server wall time: upload, stream delivery)
        = the client's e2e time, exactly (the last two are what the model does not explain).
engine counters (real engines)
    Per-phase deltas of the engine's own time counters (`EngineAdapter.time_split`: vLLM's
    queue/prefill/decode histograms, llama.cpp's prompt and predicted seconds). Engines time
    onboarding inside prefill (vLLM) or not at all, so it shows only where a counter names it;
    the rest of the client's time is `other`.
client timings (any server)
    TTFT and decode (e2e - TTFT) only: the TTFT part cannot be split.

Then the noise's side: which resource the noise competed for (tcp/iperf3 noise: the fabric,
which G4 reads cross; fio: storage, G3/G4 reads), the share of request time spent onboarding
from the tiers behind it, and how much of that resource the noise used (achieved bytes/s over
the resource's capacity, when known: the mock's profile states its fabric). When that share is
small, the report says plainly that the noise could not have mattered much, with the numbers.

Pure: DataFrames and dicts in, pydantic models out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import pandas as pd

TIERS = ("G2", "G3", "G4")
GT_COMPONENTS = ("queue", "onboard_G2", "onboard_G3", "onboard_G4", "prefill", "decode")
RESIDUALS = ("server_other", "transport")
LINKS = ("fabric", "disk", "pcie")
COMPONENT_TEXT = {
    "queue": "queueing (waiting for admission)",
    "onboard_G2": "onboarding from G2 (host memory -> GPU)",
    "onboard_G3": "onboarding from G3 (local disk reads)",
    "onboard_G4": "onboarding from G4 (reads over the fabric)",
    "prefill": "prefill (GPU compute)",
    "decode": "decode (first token -> last token)",
    "server_other": "server time outside the model (parsing, tokenizing, a late event loop)",
    "transport": "transport (client e2e - server time)",
    "ttft": "time to first token (queue, onboarding and prefill, not separable)",
    "other": "not covered by the engine's counters",
}
# What each noise kind competes for, and the tiers whose reads cross that resource.
NOISE_RESOURCE: dict[str, tuple[str, tuple[str, ...]]] = {
    "tcp": ("fabric", ("G4",)),
    "iperf3": ("fabric", ("G4",)),
    "fio": ("storage", ("G3", "G4")),
}
SMALL_SHARE = 0.10  # below this share of request time, noise on the resource cannot matter much


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PhaseAttribution(_Model):
    phase: str = Field(description="phase name")
    label: str = Field(description="request label of the phase (quiet, noisy, cached ...)")
    source: str = Field(description="mock ground truth | engine counters (<engine>) | client timings")
    requests: int = Field(description="ok requests attributed")
    measured_s: float = Field(description="sum of the client's e2e time over those requests, request-s")
    components_s: dict[str, float] = Field(description="request-seconds per component (sum = measured_s)")
    shares: dict[str, float] = Field(description="components_s / measured_s")
    links_s: dict[str, float] = Field(
        default_factory=dict,
        description="onboarding request-seconds by the link on the critical path (fabric, disk, pcie)",
    )
    noise_bytes_per_s: float | None = Field(
        None, description="competing traffic at the resource while the requests ran (mock: modelled)"
    )
    capacity_bytes_per_s: float | None = Field(None, description="the resource's capacity, when known")
    left_bytes_per_s: float | None = Field(
        None, description="what the noise left of the resource for the cache reads (mock: G4 link), mean"
    )
    notes: list[str] = Field(default_factory=list, description="what the reader must know")


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
    noise_where: str = Field(description="how the achieved rate was measured")
    capacity_bytes_per_s: float | None = Field(None, description="the resource's capacity, B/s")
    utilisation: float | None = Field(None, description="noise_bytes_per_s / capacity_bytes_per_s")
    quiet_left_bytes_per_s: float | None = Field(None, description="bandwidth the quiet reads could use")
    noisy_left_bytes_per_s: float | None = Field(None, description="bandwidth the noise left the reads")
    could_matter: bool | None = Field(
        None, description="False when the quiet share is below SMALL_SHARE: the noise could not matter much"
    )
    sentence: str = Field(description="the explanation in words, with the numbers")


# --------------------------------------------------------------------------- per request


def ground_truth_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The mock's ground-truth lines as one row per request id with the columns attribution needs."""
    import pandas as pd

    out = []
    for r in rows:
        if not r.get("request_id") or r.get("end_ns") is None:
            continue
        by_tier = r.get("onboard_ms_by_tier") or {}
        by_link = r.get("onboard_ms_by_link") or {}
        onboard = float(r.get("onboard_ms") or 0.0)
        if not by_tier and onboard > 0:  # a ground truth from before the split: by tokens read
            tok = r.get("tokens_from_tier") or {}
            whole = sum(float(tok.get(t, 0)) for t in TIERS)
            by_tier = {t: onboard * float(tok.get(t, 0)) / whole for t in TIERS} if whole else {}
        first = r.get("first_token_ns")
        row = {
            "request_id": r["request_id"],
            "gt_server_ms": (r["end_ns"] - r["received_ns"]) / 1e6,
            "gt_ttft_ms": (first - r["received_ns"]) / 1e6 if first is not None else None,
            "gt_decode_ms": (r["end_ns"] - first) / 1e6 if first is not None else 0.0,
            "gt_queue_ms": float(r.get("queue_ms") or 0.0),
            "gt_prefill_ms": float(r.get("prefill_ms") or 0.0),
            "gt_onboard_ms": onboard,
            "gt_noise_bytes_per_s": float(r.get("fabric_noise_bytes_per_s") or 0.0),
            "gt_fabric_bytes_per_s": r.get("fabric_capacity_bytes_per_s"),
            "gt_g4_link_bytes_per_s": r.get("g4_link_bytes_per_s"),
            "gt_has_links": bool(r.get("onboard_ms_by_link")) or onboard <= 0,
        }
        for t in TIERS:
            row[f"gt_onboard_{t}_ms"] = float(by_tier.get(t, 0.0))
        for link in LINKS:
            row[f"gt_link_{link}_ms"] = float(by_link.get(link, 0.0))
        out.append(row)
    return pd.DataFrame(out)


def attribute_requests(requests: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    """One row per ok request with a ground-truth line: component columns in ms, summing to e2e_ms.

    Columns: request_id, phase, label, e2e_ms, one per GT_COMPONENTS and RESIDUALS, link_<link>,
    noise_bytes_per_s, capacity_bytes_per_s.
    """
    import pandas as pd

    ok = requests[(requests["status"] == "ok") & requests["e2e_ms"].notna()]
    if ok.empty or truth.empty:
        return pd.DataFrame()
    j = ok[["request_id", "phase", "label", "e2e_ms"]].merge(truth, on="request_id", how="inner")
    j = j[j["gt_ttft_ms"].notna()]
    out = pd.DataFrame({"request_id": j["request_id"], "phase": j["phase"], "label": j["label"]})
    out["e2e_ms"] = j["e2e_ms"].astype(float)
    out["queue"] = j["gt_queue_ms"]
    for t in TIERS:
        out[f"onboard_{t}"] = j[f"gt_onboard_{t}_ms"]
    out["prefill"] = j["gt_prefill_ms"]
    out["decode"] = j["gt_decode_ms"]
    # the onboarding split may come from tokens (older lines): whatever it misses is server_other
    explained_ttft = j["gt_queue_ms"] + j["gt_prefill_ms"] + sum(j[f"gt_onboard_{t}_ms"] for t in TIERS)
    out["server_other"] = j["gt_ttft_ms"] - explained_ttft
    out["transport"] = out["e2e_ms"] - j["gt_server_ms"]
    for link in LINKS:
        out[f"link_{link}"] = j[f"gt_link_{link}_ms"]
    out["has_links"] = j["gt_has_links"]
    out["noise_bytes_per_s"] = j["gt_noise_bytes_per_s"]
    out["capacity_bytes_per_s"] = j["gt_fabric_bytes_per_s"]
    out["left_bytes_per_s"] = j["gt_g4_link_bytes_per_s"]
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- per phase


def _phase_model(
    phase: str, label: str, source: str, n: int, measured: float, comps: dict[str, float], **extra: Any
) -> PhaseAttribution:
    shares = {k: (v / measured if measured > 0 else 0.0) for k, v in comps.items()}
    return PhaseAttribution(
        phase=phase,
        label=label,
        source=source,
        requests=n,
        measured_s=measured,
        components_s=comps,
        shares=shares,
        **extra,
    )


def from_ground_truth(per_request: pd.DataFrame) -> list[PhaseAttribution]:
    """Sum `attribute_requests` rows per phase (request-seconds)."""
    out: list[PhaseAttribution] = []
    if per_request.empty:
        return out
    for (phase, label), g in per_request.groupby(["phase", "label"], sort=False):
        comps = {c: float(g[c].sum()) / 1e3 for c in (*GT_COMPONENTS, *RESIDUALS)}
        links = {link: float(g[f"link_{link}"].sum()) / 1e3 for link in LINKS} if g["has_links"].all() else {}
        cap = g["capacity_bytes_per_s"].dropna()
        left = g["left_bytes_per_s"].dropna()
        notes = []
        if comps["server_other"] + comps["transport"] > 0.2 * float(g["e2e_ms"].sum()) / 1e3:
            notes.append(
                "more than a fifth of the time is outside the mock's model (server overhead and "
                "transport): the machine running the mock was busy, or the phase is too short"
            )
        out.append(
            _phase_model(
                str(phase),
                str(label),
                "mock ground truth",
                len(g),
                float(g["e2e_ms"].sum()) / 1e3,
                comps,
                links_s=links,
                noise_bytes_per_s=float(g["noise_bytes_per_s"].mean()),
                capacity_bytes_per_s=float(cap.iloc[0]) if len(cap) else None,
                left_bytes_per_s=float(left.mean()) if len(left) else None,
                notes=notes,
            )
        )
    return out


def from_counters(
    requests: pd.DataFrame, deltas: Mapping[str, Mapping[str, float]], adapter: Any
) -> list[PhaseAttribution]:
    """Per phase, the engine's own time counters (adapter.time_split(deltas)); the rest is `other`."""
    out: list[PhaseAttribution] = []
    ok = requests[(requests["status"] == "ok") & requests["e2e_ms"].notna()]
    for (phase, label), g in ok.groupby(["phase", "label"], sort=False):
        d = deltas.get(str(phase))
        split = adapter.time_split(d) if d else {}
        if not split:
            continue
        measured = float(g["e2e_ms"].sum()) / 1e3
        comps = {k: float(v) for k, v in split.items()}
        rest = measured - sum(comps.values())
        notes = []
        if rest < -0.05 * measured:
            notes.append(
                f"the engine's counters add up to {sum(comps.values()):.3g} s, more than the "
                f"{measured:.3g} s the client measured (requests outside the phase, or overlapping timers)"
            )
        comps["other"] = max(0.0, rest)
        if "prefill" in comps and not any(k.startswith("onboard_") for k in comps):
            notes.append(f"{adapter.name} times onboarding (KV loads) inside prefill: not split out")
        out.append(
            _phase_model(
                str(phase),
                str(label),
                f"engine counters ({adapter.name})",
                len(g),
                measured,
                comps,
                notes=notes,
            )
        )
    return out


def from_client(requests: pd.DataFrame) -> list[PhaseAttribution]:
    """TTFT and decode per phase: all any server gives."""
    out: list[PhaseAttribution] = []
    ok = requests[(requests["status"] == "ok") & requests["e2e_ms"].notna()]
    for (phase, label), g in ok.groupby(["phase", "label"], sort=False):
        e2e = float(g["e2e_ms"].sum()) / 1e3
        ttft = float(g["ttft_ms"].fillna(g["e2e_ms"]).sum()) / 1e3
        comps = {"ttft": ttft, "decode": max(0.0, e2e - ttft)}
        note = "no ground truth and no engine time counters: queue, onboarding and prefill are one number"
        out.append(_phase_model(str(phase), str(label), "client timings", len(g), e2e, comps, notes=[note]))
    return out


def attribute_run(
    requests: pd.DataFrame,
    truth_rows: Sequence[Mapping[str, Any]] | None = None,
    deltas: Mapping[str, Mapping[str, float]] | None = None,
    adapter: Any = None,
    skip_labels: Sequence[str] = ("probe",),
) -> list[PhaseAttribution]:
    """Every phase's attribution from the best source: mock ground truth, engine counters, client."""
    if requests.empty:
        return []
    req = requests[~requests["label"].isin(list(skip_labels))]
    done: dict[str, PhaseAttribution] = {}
    if truth_rows:
        for a in from_ground_truth(attribute_requests(req, ground_truth_frame(truth_rows))):
            done.setdefault(a.phase, a)
    if deltas and adapter is not None and hasattr(adapter, "time_split"):
        rest = req[~req["phase"].isin(list(done))]
        for a in from_counters(rest, deltas, adapter):
            done.setdefault(a.phase, a)
    rest = req[~req["phase"].isin(list(done))]
    for a in from_client(rest):
        done.setdefault(a.phase, a)
    order = list(dict.fromkeys(req["phase"]))
    return sorted(done.values(), key=lambda a: order.index(a.phase) if a.phase in order else len(order))


# --------------------------------------------------------------------------- the noise's side


def pooled_shares(phases: Sequence[PhaseAttribution]) -> dict[str, float]:
    """Shares of the pooled request time of several phases (request-seconds weighted)."""
    total = sum(p.measured_s for p in phases)
    comps: dict[str, float] = {}
    for p in phases:
        for k, v in p.components_s.items():
            comps[k] = comps.get(k, 0.0) + v
    return {k: v / total for k, v in comps.items()} if total > 0 else {}


def _pooled_links(phases: Sequence[PhaseAttribution]) -> dict[str, float]:
    total = sum(p.measured_s for p in phases)
    links: dict[str, float] = {}
    for p in phases:
        for k, v in p.links_s.items():
            links[k] = links.get(k, 0.0) + v
    return {k: v / total for k, v in links.items()} if total > 0 else {}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _gbps(x: float | None) -> str:
    return "n/a" if x is None else f"{x / 1e9:.3g} GB/s"


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
    known = all(p.source != "client timings" for p in (*q, *n)) and bool(tiers)
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
        where = "at the mock's fabric (modelled bytes/s, as its requests saw it)"
    else:
        rate = sender_bytes_per_s
        where = "as sent by the noise generator" if rate else "not measured"
    cap = caps[0] if caps else capacity_bytes_per_s
    q_left = [p.left_bytes_per_s for p in q if p.left_bytes_per_s]
    n_left = [p.left_bytes_per_s for p in n if p.left_bytes_per_s]
    util = rate / cap if rate is not None and cap else None
    could = None if q_share is None else q_share >= SMALL_SHARE
    sentence = _sentence(resource, tiers, q_share, n_share, q_bound, top, qs, rate, cap, util)
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
        noise_where=where,
        capacity_bytes_per_s=cap,
        utilisation=util,
        quiet_left_bytes_per_s=sum(q_left) / len(q_left) if q_left else None,
        noisy_left_bytes_per_s=sum(n_left) / len(n_left) if n_left else None,
        could_matter=could,
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
        if q_bound is not None:
            parts.append(
                f"The {resource} itself was the slowest stage for {_pct(q_bound)} of the quiet time "
                "(the rest of the onboarding waited on another link): noise first uses the headroom."
            )
    if rate is not None:
        capacity = f" of its {_gbps(cap)} capacity ({_pct(util)})" if cap else " (capacity unknown)"
        parts.append(f"The noise reached {_gbps(rate)} on the {resource}{capacity}.")
    else:
        parts.append("The noise's rate was not measured.")
    return " ".join(parts)
