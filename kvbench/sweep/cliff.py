"""The tier-cliff map: `--over working_set=8k,16k,...` on the ttft or throughput test, the tier
boundaries the tiers' sizes predict, and where the serving tier actually changed.

The sizes come from the embedded mock's profile, from the server's adapter (vLLM's
cache_config_info, llama.cpp's /props) and from `--tiers` (which wins); kvbench.sweep.tiers turns
a size into a boundary. The observed tier is the mock's ground truth, or for a real server its
cached share of the warm prompt and, where the engine counts hits by source, the tier named.

A point's working set is the tokens the warm request's KV must survive: its own prompt (cold)
plus the filler prompts sent between cold and warm (`test.eviction: filler`). The mock writes
every computed block through to every enabled tier, each an LRU of capacity_bytes / block bytes
(kvbench/mock/costs/cache.py), so the warm prompt comes from the fastest tier that holds the whole
working set, and is recomputed beyond the largest. The boundary of a tier is its capacity in
tokens: capacity_bytes / (KV bytes per token x block tokens), whole blocks, x block tokens.

On the throughput test a point's working set W is prompts.count = ceil(W / L) distinct prompts
of the one length L, and load.requests = PASSES x that count (each prompt used PASSES times,
shuffled: `sampling: each_equally`). The cached phase starts from a reset cache, so each prompt's
first use is a cold compute no tier can serve: the observation reads the repeats, leaving out a
repeat sent while the same prompt's previous request was still in flight (it cannot hit yet).
The mock promotes every hit into G1 (and G2), so a repeat comes from the fastest tier still
holding it: every repeat from one tier while W fits in it, and past it the repeats whose reuse
distance exceeds it from the next (about a tenth at 1.1 x the capacity, half at 2 x under the
shuffled order). So the serving tier of a throughput point is the slowest tier (or recompute)
that served at least MIN_SHARE of the repeats, not the one that served most (that
would place each cliff near twice its capacity); the boundary is the same capacity as ttft's.
On a real server: the repeats' hit ratio, the engine's tier counter of the cached phase. Keep
load.concurrency well under the prompt count: at or above it every repeat is sent while its
previous use is in flight, and the point has no serving tier (None, left out of the table).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvbench.engines.adapters import TierCapacity
from kvbench.errors import UsageError
from kvbench.results import load_record, read_jsonl
from kvbench.sweep.points import hit_ratio
from kvbench.sweep.tiers import (
    TierSpec,
    boundary_tokens,
    merge,
    parse_tiers,
    parse_tokens,
    reported_capacities,
)

WORKING_SET = "working_set"
TIERS = ("G1", "G2", "G3", "G4")
MISS = "recompute"
CACHED = "cached"  # a real server's hit whose tier it does not say (llama.cpp: slot or RAM cache)
PARTIAL = "partial"  # a real server kept only part of the warm prompt: its tier already overflowed
FULL_HIT = 0.9  # of the sweep's best hit ratio: below it a hit is PARTIAL
PASSES = 3  # throughput: uses of each prompt in the cached phase (one cold, the rest repeats)
MIN_SHARE = 0.05  # throughput: a tier serving this share of the repeats' tokens is the point's
PHASE = {"ttft": "ttft", "throughput": "cached"}  # the phase whose engine counters name the tier


def expand(assignment: dict[str, str], prompt_tokens: int, test: str = "ttft") -> dict[str, str]:
    """The real fields a working-set point sets: ttft's fillers for what the warm prompt does not
    fill; throughput's distinct prompts, each sent PASSES times."""
    out = {k: v for k, v in assignment.items() if k != WORKING_SET}
    if WORKING_SET not in assignment:
        return out
    ws = parse_tokens(assignment[WORKING_SET])
    if test == "throughput":
        count = -(-ws // prompt_tokens)
        return {**out, "prompts.count": str(count), "load.requests": str(PASSES * count)}
    if ws < prompt_tokens:
        raise UsageError(
            f"--over working_set={assignment[WORKING_SET]}: below the prompt's own {prompt_tokens} tokens"
        )
    fillers = ws - prompt_tokens
    out["test.eviction"] = "filler" if fillers else "none"
    if fillers:
        out["test.filler_tokens"] = str(fillers)
    return out


def prompt_length(scn: Any) -> int:
    """The one fixed prompt length a working-set sweep needs (the ttft or throughput test)."""
    lengths = scn.prompts.lengths
    if scn.test_name not in PHASE or not isinstance(lengths, list) or len(lengths) != 1:
        raise UsageError(
            "--over working_set: needs the ttft or throughput test with one prompt length "
            "(e.g. kvbench sweep ttft --set prompts.lengths=[4000] --over working_set=8k,32k)"
        )
    if scn.test_name == "throughput":
        test = scn.test
        if test.noisy.enabled or scn.prompts.reuse.hit_rate is not None or scn.load.kind == "sequential":
            raise UsageError(
                "--over working_set: the throughput test needs its plain cached phase under a "
                "concurrent or rate load (no test.noisy, no prompts.reuse.hit_rate)"
            )
    return int(lengths[0])


def effective_working_set(ws: int, prompt_tokens: int) -> int:
    """What the run sends: ttft's fillers are whole prompts of the same length (rounded up)."""
    fillers = ws - prompt_tokens
    return prompt_tokens * (1 + (-(-fillers // prompt_tokens) if fillers else 0))


@dataclass(frozen=True)
class Boundary:
    """Past `tokens` of working set, a warm prompt no longer comes from `tier`."""

    tier: str
    tokens: int
    next_tier: str
    source: str = ""


def mock_tiers(scn: Any) -> tuple[dict[str, tuple[int, str]], str, float | None]:
    """The embedded mock's tiers in tokens (by tier, with a source), a note, KV bytes per token."""
    from kvbench.mock.config import TieredProfile
    from kvbench.mock.costs.timing import derive_params
    from kvbench.mock.profiles import load_profile

    name = scn.target.mock_profile
    profile = load_profile(name, {**scn.test.mock_defaults, **scn.target.mock_overrides})
    if not isinstance(profile, TieredProfile):
        return {}, f"mock profile {name} has no cache tiers", None
    params = derive_params(profile)
    src = f"mock profile {name}"
    out = {
        tier: (params.capacity_blocks(tier) * params.block_tokens, src)
        for tier in TIERS
        if params.tier(tier).enabled
    }
    per_token = params.block_bytes / params.block_tokens
    note = f"{src}: {per_token / 1024:.0f} KiB of KV per token, {params.block_tokens}-token blocks"
    return out, note, per_token


def predicted_boundaries(
    scn: Any, spec: TierSpec | None = None, reported: list[TierCapacity] | None = None
) -> tuple[list[Boundary], str]:
    """The boundaries this scenario's tiers predict, with where their sizes came from: the embedded
    mock's profile, the server's adapter (`reported`), `--tiers` (`spec`, which wins)."""
    spec = spec or TierSpec()
    notes: list[str] = []
    sized: dict[str, tuple[int, str]] = {}
    per_token = None
    if scn.target.base_url is None:
        sized, note, per_token = mock_tiers(scn)
        notes.append(note)
    caps = merge(list(reported or []), spec)
    kv = spec.kv_bytes_per_token or per_token
    if spec.kv_source:
        notes.append(spec.kv_source)
    for cap in caps:
        tokens = boundary_tokens(cap, prompt_length(scn), scn.output.max_tokens, kv)
        if tokens is not None:
            sized[cap.tier] = (tokens, cap.source)
            notes.append(cap.source)
        else:
            notes.append(f"{cap.source} left out: bytes need kv=BYTES_PER_TOKEN in --tiers")
    serving: list[tuple[str, int, str]] = []
    for tier in TIERS:
        if tier in sized and (not serving or sized[tier][0] > serving[-1][1]):
            serving.append((tier, *sized[tier]))  # a tier no larger than a faster one never serves
    if not serving:
        return [], "no prediction: " + (
            "; ".join(notes) if notes else "the server reports no tier sizes (give --tiers G1=...)"
        )
    names = [t for t, _, _ in serving] + [MISS]
    out = [Boundary(t, n, names[i + 1], src) for i, (t, n, src) in enumerate(serving)]
    return out, "; ".join(dict.fromkeys(notes))


def predicted_tier(tokens: int, boundaries: list[Boundary]) -> str:
    for b in boundaries:
        if tokens <= b.tokens:
            return b.tier
    return MISS


def serving_tier(run_dir: Path, label_rows: list[dict[str, Any]]) -> str | None:
    """Where the measured warm request's prompt came from: the mock's ground truth; for a real
    server, recomputed when under half its prompt was cached, else the tier the engine's counters
    name (vLLM's prompt_tokens_by_source) or CACHED where they name none (llama.cpp)."""
    truth_path = run_dir / "mock_ground_truth.jsonl"
    if not label_rows:
        return None
    if truth_path.exists():
        wanted = {r["request_id"] for r in label_rows}
        for t in read_jsonl(truth_path):
            if t.get("request_id") in wanted:
                by_tier = t.get("tokens_from_tier") or {}
                if not t.get("cached_tokens"):
                    return MISS
                return max(TIERS, key=lambda k: by_tier.get(k, 0))
        return None
    share = hit_ratio(label_rows)
    if share is None:
        return None
    if share < 0.5:
        return MISS
    return counted_tier(run_dir) or CACHED


def repeats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput rows that could hit: a prompt's later uses, each sent after its previous use
    ended (a first use is cold; one sent while the previous was in flight finds nothing yet)."""
    ended: dict[int, int] = {}
    out = []
    for r in sorted(rows, key=lambda r: r.get("sent_ns") or 0):
        pid, sent = r.get("prompt_id"), r.get("sent_ns")
        if pid in ended and sent is not None and ended[pid] <= sent:
            out.append(r)
        if pid is not None and r.get("end_ns") is not None:
            ended[pid] = max(ended.get(pid, 0), r["end_ns"])
    return out


def repeat_shares(run_dir: Path, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each tier's (and recompute's) share of the repeats, from the mock's truth: a repeat counts
    for the tier that served most of its prompt, or recompute under half (so a prompt's tail that
    no block holds does not count as a miss, however short the prompt)."""
    wanted = {r["request_id"] for r in rows}
    counts = dict.fromkeys([*TIERS, MISS], 0)
    for t in read_jsonl(run_dir / "mock_ground_truth.jsonl"):
        if t.get("request_id") in wanted and t.get("status") == "ok":
            by_tier = t.get("tokens_from_tier") or {}
            hit = 2 * int(t.get("cached_tokens") or 0) >= int(t["prompt_tokens"])
            counts[max(TIERS, key=lambda k: by_tier.get(k, 0)) if hit else MISS] += 1
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def throughput_tier(run_dir: Path, rows: list[dict[str, Any]]) -> str | None:
    """The cached phase's serving tier: the slowest tier (or recompute) serving MIN_SHARE of the
    repeats (the mock's truth); on a real server as serving_tier does, on the
    repeats and the cached phase's counters."""
    again = [r for r in repeats(rows) if r.get("status") == "ok"]
    if not again:
        return None
    if (run_dir / "mock_ground_truth.jsonl").exists():
        shares = repeat_shares(run_dir, again)
        return next((k for k in [MISS, *TIERS[::-1]] if shares.get(k, 0.0) >= MIN_SHARE), None)
    share = hit_ratio(again)
    if share is None:
        return None
    return MISS if share < 0.5 else counted_tier(run_dir, PHASE["throughput"]) or CACHED


def counted_tier(run_dir: Path, phase: str = "ttft") -> str | None:
    """The tier the engine's tier counter credits with most of the phase's hits (ttft's cold and
    fillers are salted: the warm request is the phase's one hit)."""
    from kvbench.engines.adapters import get_adapter
    from kvbench.errors import KvbenchError
    from kvbench.results import METRIC_DELTAS

    path = run_dir / METRIC_DELTAS
    try:
        adapter = get_adapter(load_record(run_dir).manifest.target.engine)
        deltas = json.loads(path.read_text()) if path.exists() else {}
    except (KvbenchError, OSError, ValueError):
        return None
    by_tier: dict[str, float] = {}
    for label, tokens in adapter.tier_hits(deltas.get(phase) or {}).items():
        tier = adapter.tier_of_source.get(label, label if label in TIERS else "")
        if tier and tokens > 0:
            by_tier[tier] = by_tier.get(tier, 0.0) + tokens
    return max(by_tier, key=lambda t: by_tier[t]) if by_tier else None


def cliff_table(points: list[tuple[int, str | None]], boundaries: list[Boundary]) -> list[dict[str, Any]]:
    """Per predicted boundary: the largest working set still served at or above its tier and the
    smallest served below it, and whether the prediction lies between them (one sweep step). A
    CACHED point (a hit whose tier the engine does not say) is inside the last tier's boundary and
    leaves the others unplaced: their within_one_step is None."""
    order = {t: i for i, t in enumerate([*TIERS, MISS])}
    order[PARTIAL] = order[MISS]
    cached = any(t == CACHED for _, t in points)
    rows = []
    for b in boundaries:
        rank = order[b.tier]
        last = b.next_tier == MISS
        seen = [(ws, order.get(t, rank)) for ws, t in points if t is not None]
        inside = [ws for ws, r in seen if r <= rank]
        beyond = [ws for ws, r in seen if r > rank]
        last_in = max(inside) if inside else None
        first_out = min(beyond) if beyond else None
        ok = last_in is not None and first_out is not None and last_in <= b.tokens <= first_out
        ordered = last_in is None or first_out is None or last_in < first_out
        judged = None if cached and not last else ok and ordered
        rows.append(
            {**asdict(b), "observed_last_inside": last_in if judged is not None else None,
             "observed_first_beyond": first_out if judged is not None else None,
             "within_one_step": judged}
        )  # fmt: skip
    return rows


def cliff_figures(
    run_dir: Path, assignment: dict[str, str], scn: Any, metrics: dict[str, Any]
) -> dict[str, Any]:
    """A working-set point's own figures: the working set sent, the tier that served the warm
    prompt (throughput: the cached phase's repeats), and the tier the mock's profile predicts (a
    server's: set by cliff_summary)."""
    from kvbench.results import REQUESTS

    length = prompt_length(scn)
    ws = effective_working_set(parse_tokens(assignment[WORKING_SET]), length)
    rows = [r for r in read_jsonl(run_dir / REQUESTS) if r.get("label") == metrics.get("label")]
    boundaries, _ = predicted_boundaries(scn) if scn.target.base_url is None else ([], "")
    tier = throughput_tier(run_dir, rows) if scn.test_name == "throughput" else serving_tier(run_dir, rows)
    extra = {}
    if scn.test_name == "throughput":  # the phase's hit ratio counts its cold first uses too
        again = repeats(rows)
        extra = {"repeats": len(again), "repeat_hit_ratio": hit_ratio(again)}
    return {
        **extra,
        "engine": load_record(run_dir).manifest.target.engine,  # named or detected
        "working_set_tokens": ws,
        "serving_tier": tier,
        "tier_seen_by": "mock ground truth" if (run_dir / "mock_ground_truth.jsonl").exists() else "server",
        "predicted_tier": predicted_tier(ws, boundaries) if boundaries else None,
    }


def mark_partial(points: list[Any]) -> None:
    """A real server's hit below FULL_HIT of the sweep's best (the whole prompt but the blocks an
    engine always recomputes) is PARTIAL: the tier held only part of the working set (vLLM evicts
    a prompt's tail blocks first). The mock's points carry ground truth and are left alone."""
    ratios = [p.metrics.get("hit_ratio") for p in points if p.metrics.get("serving_tier") not in (None, MISS)]
    best = max((r for r in ratios if r is not None), default=None)
    for p in points:
        m = p.metrics
        real = m.get("tier_seen_by") == "server" and m.get("serving_tier") not in (None, MISS)
        if best and real and m.get("hit_ratio") is not None and m["hit_ratio"] < FULL_HIT * best:
            m["serving_tier"] = PARTIAL


def cliff_summary(state: Any, scn: Any) -> dict[str, Any]:
    """sweep.json's `cliff`: the boundaries, where they came from, predicted vs observed; every
    point's predicted_tier set from them."""
    main = [p for p in state.points if getattr(p, "arm", "main") == "main" and p.metrics]
    spec = parse_tiers(getattr(state.plan, "tiers", None))
    engine = next((p.metrics["engine"] for p in main if p.metrics.get("engine")), scn.target.engine)
    boundaries, source = predicted_boundaries(scn, spec, reported_capacities(scn, engine))
    mark_partial(main)
    seen = []
    for p in main:
        ws = p.metrics.get("working_set_tokens")
        if ws is None:
            continue
        p.metrics["predicted_tier"] = predicted_tier(ws, boundaries) if boundaries else None
        seen.append((ws, p.metrics.get("serving_tier")))
    table = cliff_table(sorted(seen), boundaries)
    unplaced = [r for r in table if r["within_one_step"] is None]
    if unplaced:  # the report's table says yes/no: a boundary nothing observed places is named here
        where = ", ".join(f"{r['tier']} -> {r['next_tier']} at {r['tokens']:,}" for r in unplaced)
        source += f"; not observable: {where} (the engine does not say which tier served a hit)"
    return {
        "source": source,
        "boundaries": [asdict(b) for b in boundaries],
        "table": [r for r in table if r["within_one_step"] is not None],
        "unobserved": unplaced,
    }
