"""The tier-cliff map: `--over working_set=8k,16k,...` on the ttft test, the tier boundaries the
mock profile's capacities predict, and where the warm request's serving tier actually changed.

A point's working set is the tokens the warm request's KV must survive: its own prompt (cold)
plus the filler prompts sent between cold and warm (`test.eviction: filler`). The mock writes
every computed block through to every enabled tier, each an LRU of capacity_bytes / block bytes
(kvbench/mock/cache.py), so the warm prompt comes from the fastest tier that holds the whole
working set, and is recomputed beyond the largest. The boundary of a tier is its capacity in
tokens: capacity_bytes / (KV bytes per token x block tokens), whole blocks, x block tokens.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.results import read_jsonl

WORKING_SET = "working_set"
TIERS = ("G1", "G2", "G3", "G4")
MISS = "recompute"


def parse_tokens(text: str) -> int:
    """'16k' -> 16000, '16Ki' -> 16384, '20000' -> 20000."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(k|Ki|M|Mi)?\s*", text)
    if not m:
        raise UsageError(f"--over working_set={text}: expected tokens, e.g. 16k, 16Ki or 20000")
    scale = {None: 1, "k": 1000, "Ki": 1024, "M": 1_000_000, "Mi": 1 << 20}[m.group(2)]
    return int(float(m.group(1)) * scale)


def expand(assignment: dict[str, str], prompt_tokens: int) -> dict[str, str]:
    """The real fields a working-set point sets: fillers for what the warm prompt does not fill."""
    out = {k: v for k, v in assignment.items() if k != WORKING_SET}
    if WORKING_SET not in assignment:
        return out
    ws = parse_tokens(assignment[WORKING_SET])
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
    """The one fixed prompt length a working-set sweep needs (the ttft test, one length)."""
    lengths = scn.prompts.lengths
    if scn.test_name != "ttft" or not isinstance(lengths, list) or len(lengths) != 1:
        raise UsageError(
            "--over working_set: needs the ttft test with one prompt length "
            "(e.g. kvbench sweep ttft --set prompts.lengths=[4000] --over working_set=8k,32k)"
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


def predicted_boundaries(scn: Any) -> tuple[list[Boundary], str]:
    """The embedded mock's boundaries for this scenario's profile (and overrides), with a source."""
    if scn.target.base_url is not None:
        return [], "no prediction: not the embedded mock (a server's tier sizes are not known here)"
    from kvbench.mock.config import TieredProfile
    from kvbench.mock.profiles import load_profile
    from kvbench.mock.timing import derive_params

    name = scn.target.mock_profile
    profile = load_profile(name, {**scn.test.mock_defaults, **scn.target.mock_overrides})
    if not isinstance(profile, TieredProfile):
        return [], f"no prediction: mock profile {name} has no cache tiers"
    params = derive_params(profile)
    serving: list[tuple[str, int]] = []
    for tier in TIERS:
        if not params.tier(tier).enabled:
            continue
        tokens = params.capacity_blocks(tier) * params.block_tokens
        if not serving or tokens > serving[-1][1]:  # a tier no larger than a faster one never serves
            serving.append((tier, tokens))
    names = [t for t, _ in serving] + [MISS]
    out = [Boundary(t, n, names[i + 1]) for i, (t, n) in enumerate(serving)]
    per_token = params.block_bytes / params.block_tokens
    return (
        out,
        f"mock profile {name}: {per_token / 1024:.0f} KiB of KV per token, "
        f"{params.block_tokens}-token blocks",
    )


def predicted_tier(tokens: int, boundaries: list[Boundary]) -> str:
    for b in boundaries:
        if tokens <= b.tokens:
            return b.tier
    return MISS


def serving_tier(run_dir: Path, label_rows: list[dict[str, Any]]) -> str | None:
    """Where the measured warm request's prompt came from, per the mock's ground truth (None when
    there is none: a real server)."""
    truth_path = run_dir / "mock_ground_truth.jsonl"
    if not truth_path.exists() or not label_rows:
        return None
    wanted = {r["request_id"] for r in label_rows}
    for t in read_jsonl(truth_path):
        if t.get("request_id") in wanted:
            by_tier = t.get("tokens_from_tier") or {}
            if not t.get("cached_tokens"):
                return MISS
            return max(TIERS, key=lambda k: by_tier.get(k, 0))
    return None


def cliff_table(points: list[tuple[int, str | None]], boundaries: list[Boundary]) -> list[dict[str, Any]]:
    """Per predicted boundary: the largest working set still served at or above its tier and the
    smallest served below it, and whether the prediction lies between them (one sweep step)."""
    order = {t: i for i, t in enumerate([*TIERS, MISS])}
    rows = []
    for b in boundaries:
        rank = order[b.tier]
        seen = [(ws, order[t]) for ws, t in points if t is not None]
        inside = [ws for ws, r in seen if r <= rank]
        beyond = [ws for ws, r in seen if r > rank]
        last_in = max(inside) if inside else None
        first_out = min(beyond) if beyond else None
        ok = last_in is not None and first_out is not None and last_in <= b.tokens <= first_out
        ordered = last_in is None or first_out is None or last_in < first_out
        rows.append(
            {**asdict(b), "observed_last_inside": last_in, "observed_first_beyond": first_out,
             "within_one_step": ok and ordered}
        )  # fmt: skip
    return rows


def cliff_figures(
    run_dir: Path, assignment: dict[str, str], scn: Any, metrics: dict[str, Any]
) -> dict[str, Any]:
    """A working-set point's own figures: the working set sent, the tier that served the warm
    prompt, and the tier the prediction names."""
    from kvbench.results import REQUESTS

    length = prompt_length(scn)
    ws = effective_working_set(parse_tokens(assignment[WORKING_SET]), length)
    rows = [r for r in read_jsonl(run_dir / REQUESTS) if r.get("label") == metrics.get("label")]
    boundaries, _ = predicted_boundaries(scn)
    return {
        "working_set_tokens": ws,
        "serving_tier": serving_tier(run_dir, rows),
        "predicted_tier": predicted_tier(ws, boundaries) if boundaries else None,
    }


def cliff_summary(state: Any, scn: Any) -> dict[str, Any]:
    """sweep.json's `cliff`: the boundaries, where they came from, predicted vs observed."""
    boundaries, source = predicted_boundaries(scn)
    seen = [
        (p.metrics["working_set_tokens"], p.metrics.get("serving_tier"))
        for p in state.points
        if p.metrics and p.metrics.get("working_set_tokens") is not None
    ]
    return {
        "source": source,
        "boundaries": [asdict(b) for b in boundaries],
        "table": cliff_table(sorted(seen), boundaries),
    }
