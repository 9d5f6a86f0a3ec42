"""A mock profile fitted to runs: the base profile's shape with the fitted coefficients in it.

The twin is a tiered profile in real time (time_scale 1) whose cache hits all come from ONE tier,
G4, standing for whatever tier served the system's warm requests (GPU memory, host RAM, a disk or
networked storage): its latency and bandwidth are the fitted onboarding; G1-G3 cache nothing, so a
hit is never cheaper than the system's was. G2 still stages the G4 reads, at a bandwidth well above
the fitted one so the fitted stage stays the bottleneck (as in kvbench.mock.costs.timing's fit).

Under load the twin runs the mock's step scheduler (`gpu.step`, kvbench.mock.costs.step): a token
budget per step, the sequence limit and the fixed cost per request, chosen by kvbench.twin.scheduler
(given, the source mock profile's, or the engine's defaults, each recorded with its origin). A twin of
kvbench's own mock keeps processor sharing, as its source does. Not modelled, so only recorded: the
link sharing under noise (the base's fabric knobs are kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.mock.config import TieredProfile
from kvbench.mock.costs.timing import ModelParams, derive_params
from kvbench.mock.profiles import load_profile, validate_profile
from kvbench.model.kv_geometry import PRESETS
from kvbench.model.prefill import prefill_time
from kvbench.results import REQUESTS, read_jsonl
from kvbench.twin import aggregate, closedloop, measure, seqlimit, slotshape, speed, tiers
from kvbench.twin import fit as F
from kvbench.twin.scheduler import Scheduler, choose
from kvbench.twin.sources import RunData

UNBOUNDED_BW = 1e15  # bytes/s standing for "no measurable transfer cost" (a hit already in place)
MAX_BLOCK = 1024  # a larger gcd of cached counts is a coincidence of the lengths, not a block
STAGING_HEADROOM = 10.0  # G2 staging bandwidth at least this many times the fitted G4 bandwidth


@dataclass(frozen=True)
class Twin:
    profile: dict[str, Any]  # the YAML's content, validated as a TieredProfile
    prefill: F.PrefillFit
    onboard: F.OnboardFit | None
    decode: F.DecodeFit | None
    notes: list[str]
    scheduler: Scheduler | None = None
    seq_limit: seqlimit.SeqLimit | None = None
    cliff: tiers.Cliff | None = None
    aggregate: aggregate.Aggregate | None = None
    speed: speed.Speed | None = None  # None: the source is kvbench's mock (its time is the model's)


def _base(name: str) -> TieredProfile:
    profile = load_profile(name)
    if not isinstance(profile, TieredProfile):
        raise UsageError(f"--base {name}: a tiered profile is needed (this one is {profile.kind})")
    return profile


def _draft(
    base: TieredProfile, geometry: str, model: str, a: float, c: float, g4: tuple[float, float]
) -> dict[str, Any]:
    """The base profile as a dict with the twin's shape and the given prefill and G4 terms."""
    d = base.model_dump()
    latency, bw = g4
    d |= {"geometry": geometry, "model_name": model, "time_scale": 1.0, "calibration": None}
    d["gpu"] |= {"prefill_linear_s_per_token": a, "prefill_quadratic_s_per_token2": 2.0 * c}
    for name in ("G1", "G2", "G3"):
        d["tiers"][name]["enabled"] = False
    g2 = d["tiers"]["G2"]
    g2["read_bandwidth_bytes_per_s"] = max(g2["read_bandwidth_bytes_per_s"], STAGING_HEADROOM * bw)
    d["tiers"]["G4"] |= {
        "enabled": True,
        "latency_s": latency,
        "read_bandwidth_bytes_per_s": bw,
        "aggregate_bandwidth_bytes_per_s": None,
    }
    fabric = d["fabric"]
    fabric["topology"] = None
    fabric["capacity_bytes_per_s"] = STAGING_HEADROOM * bw  # not fitted: out of the way of a what-if
    d.pop("fit", None)
    return d


def _params(d: dict[str, Any]) -> ModelParams:
    return derive_params(validate_profile(d, "fitted profile"))


def _warm_rows(
    runs: list[RunData], params: ModelParams, a: float, c: float, f: float
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in runs:
        for p in r.warm:
            k = min(p.cached, p.tokens)
            tail = params.chunk_tail_s(params.onboard_chunk_tokens)
            xs.append(params.kv_bytes(k))
            ys.append(p.ttft_s - prefill_time(p.tokens, k, a, c) - f - tail)
    return xs, ys


def infer_block(cached: list[int], default: int) -> int:
    """The system's cache block in tokens: the gcd of the warm rows' cached counts (llama.cpp's
    n-1: 1; vLLM's whole blocks: 16), else `default` when the rows cannot tell (none, or one length)."""
    g = math.gcd(*cached) if cached else 0
    return g if 1 <= g <= MAX_BLOCK and len(set(cached)) > 1 else default


def build_twin(
    runs: list[RunData],
    base_name: str,
    geometry: str | None,
    model: str | None,
    step_budget: int | None = None,
    max_seqs: int | None = None,
) -> Twin:
    """Fit every term the runs allow and return the twin profile (see the module docstring)."""
    base = _base(base_name)
    geometry = geometry or base.geometry
    if geometry not in PRESETS:
        raise UsageError(f"--model: unknown KV geometry {geometry!r} (known: {', '.join(sorted(PRESETS))})")
    served = model or next((r.model for r in runs if r.model), None) or base.model_name
    block = infer_block([p.cached for r in runs for p in r.warm], base.block_tokens)
    base = base.model_copy(update={"block_tokens": block})
    cold = [p for r in runs for p in r.cold]
    try:
        fixed_max = min((p.ttft_s for r in runs for p in r.warm), default=None)
        pf = F.fit_cold([p.tokens for p in cold], [p.ttft_s for p in cold], fixed_max)
    except ValueError as exc:
        raise UsageError(f"{runs[0].run_dir}: {exc}") from None
    source = next((r.source for r in runs if r.source is not None), None)
    scheduler = choose(
        source.engine if source else "generic",
        source.mock_profile if source else None,
        pf.fixed_s,
        step_budget,
        max_seqs,
        source.kind if source else "server",
        source.max_model_len if source else None,
    )
    notes = [
        f"fixed cost per request {pf.fixed_s * 1e3:.3g} ms: modelled (gpu.request_fixed_s; it holds "
        "kvbench's own HTTP cost too, paid again on the twin); subtracted from the warm rows before the "
        "onboarding fit"
    ]
    g4: tuple[float, float] = (0.0, UNBOUNDED_BW)
    onboard = None
    if any(r.warm for r in runs):
        for _ in range(2):  # the staging bandwidth follows the fitted one; refit with its chunk tail
            xs, ys = _warm_rows(
                runs, _params(_draft(base, geometry, served, pf.a, pf.c, g4)), pf.a, pf.c, pf.fixed_s
            )
            onboard = F.fit_onboard(xs, ys)
            g4 = (onboard.latency_s, onboard.bandwidth_bytes_per_s or UNBOUNDED_BW)
        if onboard is not None and onboard.bandwidth_bytes_per_s is None:
            notes.append(
                "warm TTFT does not grow with the cached bytes: the serving tier's bandwidth is unbounded"
            )
    else:
        notes.append("no warm rows: the serving tier is not fitted (latency 0, bandwidth unbounded)")
    slotted = slotshape.applies(source.engine if source else None)
    cliff = None if slotted else _cliff(runs, _params(_draft(base, geometry, served, pf.a, pf.c, g4)), pf, g4)
    if cliff is not None:  # the sweep's hits were the near tier's: G4 stands for the far one
        g4 = (cliff.far.latency_s, cliff.far.bandwidth_bytes_per_s or UNBOUNDED_BW)
    draft = _draft(base, geometry, served, pf.a, pf.c, g4)
    if cliff is not None:
        _near_tier(draft, cliff, notes)
    draft["gpu"] |= scheduler.gpu_fields()
    decode = _decode(runs, _params(draft), draft, notes)
    limit = _seq_limit(runs, draft, scheduler, max_seqs, notes)
    draft["gpu"]["max_num_seqs"] = limit.value
    if slotted:
        slotshape.shape(draft, g4, limit.value, notes)
    if limit.origin in ("gauges", "model"):  # measured: it replaces the prior (given or default stay)
        fitted = {"max_num_seqs": f"{limit.origin}: {limit.detail}"}
        scheduler = replace(scheduler, max_num_seqs=limit.value, origin=scheduler.origin | fitted)
    shared = cliff is None and onboard is not None and not slotted  # one shared serving tier, G4
    agg = _aggregate(runs, draft, limit.value) if shared else None
    if not slotted:
        _read_sharing(draft, agg, g4[1], notes)
    real = source is not None and source.kind != "mock"  # kvbench's mock keeps model time: no factor
    pace = speed.apply(runs, draft, limit.value, notes, _params) if real else None
    if scheduler.token_budget is None:
        notes.append("the source shares its GPU by processor sharing (kvbench's mock): no step scheduler")
    else:
        notes.append(
            f"under load: steps of {scheduler.token_budget} tokens, {scheduler.max_num_seqs} sequences at "
            f"once ({scheduler.origin['token_budget']})"
        )
    if limit.points:
        notes.append(
            "throughput rows fit the sequence limit only (fit.terms.max_num_seqs): --validate RUN says how "
            "well the twin predicts them"
        )
    elif any(r.throughput for r in runs):
        notes.append(
            "throughput rows are recorded, not fitted (no closed-loop phase at the TTFT sweep's pace): "
            "--validate RUN says how well the twin predicts them"
        )
    twin = Twin(draft, pf, onboard, decode, notes, scheduler, limit, cliff, agg, pace)
    draft["fit"] = fit_section(runs, twin)
    draft["description"] = f"Twin fitted by kvbench fit to {', '.join(str(r.run_dir) for r in runs)}"
    _params(draft)  # the mock must accept its own twin
    return twin


def _decode(
    runs: list[RunData], params: ModelParams, draft: dict[str, Any], notes: list[str]
) -> F.DecodeFit | None:
    itl = [pt for r in runs for pt in r.itl]
    if not itl:
        notes.append("no inter-token times: the decode step is the base profile's")
        return None
    fit = F.fit_decode([params.kv_bytes(n) for n, _ in itl], [s for _, s in itl])
    draft["gpu"]["decode_step_base_s"] = fit.base_s
    draft["gpu"]["hbm_bandwidth_bytes_per_s"] = fit.hbm_bytes_per_s or UNBOUNDED_BW
    return fit


def _near_tier(draft: dict[str, Any], cliff: tiers.Cliff, notes: list[str]) -> None:
    """G1 of the cliff's capacity: free hits, as GPU memory (G4 is the far tier already)."""
    near = _params(draft).block_bytes * cliff.capacity_blocks
    draft["tiers"]["G1"] |= {"enabled": True, "capacity_bytes": near, "latency_s": 0.0}
    draft["tiers"]["G1"]["read_bandwidth_bytes_per_s"] = UNBOUNDED_BW
    notes.append(
        f"a cliff in the hits: a near tier of {cliff.capacity_blocks} blocks whose hits cost nothing "
        f"(G1, {cliff.near_hits} of {cliff.hits} hits held whole), beyond it G4 at "
        f"{cliff.far.latency_s * 1e3:.3g} ms + bytes / "
        f"{(cliff.far.bandwidth_bytes_per_s or 0) / 1e9:.3g} GB/s (fit.terms.near_tier; one far tier "
        "stands for every slower one)"
    )


def _read_sharing(
    draft: dict[str, Any], agg: aggregate.Aggregate | None, bw: float, notes: list[str]
) -> None:
    """The serving tier's aggregate bandwidth (a fitted multiple of one read's), and the note saying so."""
    if agg is not None and agg.multiple > 1:
        draft["tiers"]["G4"]["aggregate_bandwidth_bytes_per_s"] = agg.multiple * bw
        notes.append(
            f"concurrent reads: {agg.multiple} at the serving tier's full bandwidth at once (the runs' "
            f"replay shows at least {agg.at_least}: fit.terms.aggregate); the noise link is not fitted"
        )
    else:
        notes.append(
            "concurrent reads share the serving tier's bandwidth (its aggregate is the read bandwidth: a "
            "what-if on tiers.G4.read_bandwidth_bytes_per_s moves both); the noise link is not fitted (at "
            f"{STAGING_HEADROOM:g}x the bandwidth, the base's fabric knobs kept)"
        )


def _cliff(
    runs: list[RunData], params: ModelParams, pf: F.PrefillFit, g4: tuple[float, float]
) -> tiers.Cliff | None:
    """A bounded near tier and the far tier beyond it, where the runs' hits show a cliff (twin.tiers):
    the sweep's hits and those of the throughput runs at their fewest connections."""
    fewest = min((t.concurrency for r in runs for t in r.throughput), default=None)
    if fewest is None:
        return None
    tail = params.chunk_tail_s(params.onboard_chunk_tokens)
    chosen = [r for r in runs if r.warm or any(t.concurrency == fewest for t in r.throughput)]
    per_run = []
    for r in chosen:
        rows = []
        for q in read_jsonl(r.run_dir / REQUESTS):
            n, ttft = q.get("prompt_tokens_server") or q.get("prompt_tokens"), q.get("ttft_ms")
            sent, first = q.get("sent_ns"), q.get("first_token_ns")
            if (
                q.get("status") != "ok"
                or not isinstance(n, int)
                or n <= 0
                or not isinstance(ttft, int | float)
            ):
                continue
            if not isinstance(sent, int) or not isinstance(first, int):
                continue
            c = min(int(q.get("cached_tokens") or 0), n)
            pid = q.get("prompt_id")
            key = pid if isinstance(pid, int) and pid >= 0 else q.get("request_id")
            excess = ttft / 1e3 - pf.fixed_s - prefill_time(n, c, pf.a, pf.c) if c > 0 else None
            rows.append(tiers.Row(key, n, c, sent, first, None if q.get("label") == "probe" else excess))
        per_run.append(rows)
    latency, bw = g4

    def one_tier(cached: int) -> float:
        return latency + params.kv_bytes(cached) / bw + tail

    return tiers.fit_cliff(per_run, params.block_tokens, params.kv_bytes, one_tier, tail)


def _aggregate(runs: list[RunData], draft: dict[str, Any], limit: int) -> aggregate.Aggregate | None:
    """The serving tier's aggregate bandwidth from the throughput runs at the sweep's pace (aggregate)."""
    pace = next((r.source.pace for r in runs if r.source is not None), 1.0)
    loads = [
        ld
        for r in runs
        for ld in measure.read_load(r.run_dir)
        if abs(ld.pace - pace) <= 1e-6 * max(pace, ld.pace)
    ]
    bw = draft["tiers"]["G4"]["read_bandwidth_bytes_per_s"]
    cache: dict[float, ModelParams] = {}

    def predictor(load: measure.Load, multiple: float) -> tuple[float, float]:
        if multiple not in cache:
            d = {**draft, "tiers": {**draft["tiers"], "G4": dict(draft["tiers"]["G4"])}}
            d["tiers"]["G4"]["aggregate_bandwidth_bytes_per_s"] = multiple * bw
            cache[multiple] = _params(d)
        p = closedloop.predict(cache[multiple], load.requests, load.concurrency, limit)
        return p.requests_per_s, p.ttft_p50_s

    return aggregate.choose(loads, predictor) if bw < UNBOUNDED_BW else None


def _seq_limit(
    runs: list[RunData], draft: dict[str, Any], scheduler: Scheduler, given: int | None, notes: list[str]
) -> seqlimit.SeqLimit:
    """The sequence limit from the runs' gauges or the step model's replay of their load (seqlimit)."""
    pace = next((r.source.pace for r in runs if r.source is not None), 1.0)
    loads, other = [], set()
    for r in runs:
        for load in measure.read_load(r.run_dir):
            if abs(load.pace - pace) <= 1e-6 * max(pace, load.pace):
                loads.append(load)
            else:
                other.add(str(r.run_dir))
    if other:
        names = ", ".join(sorted(other))
        notes.append(f"not fitted to (another pace than the TTFT sweep's {pace:g}): {names}")
    params = _params(draft)

    def predictor(load: measure.Load, limit: int | None) -> tuple[float, float]:
        p = closedloop.predict(params, load.requests, load.concurrency, limit)
        return p.requests_per_s, p.ttft_p50_s

    gauges = measure.read_gauges([r.run_dir for r in runs if str(r.run_dir) not in other])
    prior = scheduler.origin.get("max_num_seqs", "default")
    # kvbench's embedded mock: its profile is the system, unless the runs overrode the limit or
    # served the mock on their own (`mock serve --set gpu.max_num_seqs=4`: the name says nothing)
    exact = prior.startswith("source profile") and all(_profile_is_the_system(r.run_dir) for r in runs)
    return seqlimit.choose(loads, predictor, scheduler.max_num_seqs, prior, given, gauges, exact)


def _profile_is_the_system(run_dir: Path) -> bool:
    """The run was on the embedded mock and kept its profile's sequence limit."""
    from kvbench.configfile import read_yaml
    from kvbench.results.files import SCENARIO

    try:
        target = (read_yaml(run_dir / SCENARIO) or {}).get("target") or {}
    except Exception:  # no or unreadable scenario.yaml: nothing says the profile is exact
        return False
    overrides = target.get("mock_overrides") or {}
    gpu = overrides.get("gpu") if isinstance(overrides, dict) else None
    set_limit = "gpu.max_num_seqs" in overrides or (isinstance(gpu, dict) and "max_num_seqs" in gpu)
    return target.get("base_url") is None and not set_limit


def fit_section(runs: list[RunData], twin: Twin) -> dict[str, Any]:
    """The profile's `fit:` record: the runs, each term's coefficients and quality, the valid ranges."""
    terms: dict[str, dict[str, Any]] = {
        "prefill": {
            "a_s_per_token": twin.prefill.a,
            "c_s_per_token2": twin.prefill.c,
            "fixed_s": twin.prefill.fixed_s,
            "method": twin.prefill.method,
        }
        | twin.prefill.quality.as_dict()
    }
    if twin.onboard is not None:
        terms["onboard"] = {
            "tier": "G4",
            "latency_s": twin.onboard.latency_s,
            "bandwidth_bytes_per_s": twin.onboard.bandwidth_bytes_per_s,
        } | twin.onboard.quality.as_dict()
    if twin.decode is not None:
        terms["decode"] = {
            "step_base_s": twin.decode.base_s,
            "hbm_bytes_per_s": twin.decode.hbm_bytes_per_s,
        } | twin.decode.quality.as_dict()
    cold = [p.tokens for r in runs for p in r.cold]
    cached = [p.cached for r in runs for p in r.warm]
    tput = [t for r in runs for t in r.throughput]
    valid: dict[str, Any] = {
        "prompt_tokens_min": min(cold),
        "prompt_tokens_max": max(cold),
        "cached_tokens_min": min(cached) if cached else None,
        "cached_tokens_max": max(cached) if cached else None,
        "concurrency_max": max((t.concurrency for t in tput), default=1),
    }
    # the replay of the finished twin: after the speed fit where it ran, else the limit's
    replayed = (twin.speed.points if twin.speed else ()) or (twin.seq_limit.points if twin.seq_limit else ())
    predicted = {(p.run, p.phase): p.predicted() for p in replayed}
    observed = [
        {
            "label": t.label,
            "concurrency": t.concurrency,
            "requests_per_s": t.requests_per_s,
            "ttft_p50_s": t.ttft_p50_s,
        }
        | predicted.get((t.run, t.phase), {})
        for t in tput
    ]
    if twin.scheduler is not None:
        terms["scheduler"] = twin.scheduler.record()
    if twin.seq_limit is not None:
        terms["max_num_seqs"] = twin.seq_limit.record()
    if twin.cliff is not None:
        terms["near_tier"] = twin.cliff.record()
    if twin.aggregate is not None:
        terms["aggregate"] = twin.aggregate.record()
    if twin.speed is not None:
        terms["speed"] = twin.speed.record()
    sources = [r.source.as_dict() for r in runs if r.source is not None]
    return {
        "runs": [str(r.run_dir) for r in runs],
        "source": sources[0] if sources else {},
        "terms": terms,
        "valid": valid,
        "observed_throughput": observed,
        "notes": twin.notes,
    }
