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

The noise's side (which resource it competed for, the share of time on it, how much of it the
noise used) is `noise_explain`, built on these per-phase attributions.

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
        None,
        description="competing traffic achieved at the resource while the requests ran (mock: modelled, "
        "never above a link's capacity)",
    )
    noise_offered_bytes_per_s: float | None = Field(
        None, description="competing traffic offered while the requests ran (mock: modelled), mean"
    )
    noise_flows: int | None = Field(None, description="noise flows while the requests ran (mock), most seen")
    noise_link: str | None = Field(
        None, description="the link the noise shared with the cache reads (mock: its topology's)"
    )
    capacity_bytes_per_s: float | None = Field(None, description="the resource's capacity, when known")
    left_bytes_per_s: float | None = Field(
        None, description="what the noise left of the resource for the cache reads (mock: G4 link), mean"
    )
    notes: list[str] = Field(default_factory=list, description="what the reader must know")


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
            # a ground truth from before offered and achieved were two numbers: the one it has
            "gt_noise_offered_bytes_per_s": float(
                r.get("noise_offered_bytes_per_s", r.get("fabric_noise_bytes_per_s")) or 0.0
            ),
            "gt_noise_flows": int(r.get("noise_flows") or 0),
            "gt_noise_link": r.get("noise_link"),
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
    out["noise_offered_bytes_per_s"] = j["gt_noise_offered_bytes_per_s"]
    out["noise_flows"] = j["gt_noise_flows"]
    out["noise_link"] = j["gt_noise_link"]
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
                noise_offered_bytes_per_s=float(g["noise_offered_bytes_per_s"].mean()),
                noise_flows=int(g["noise_flows"].max()),
                noise_link=next((str(v) for v in g["noise_link"].dropna()), None),
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
