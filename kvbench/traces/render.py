"""The text table `trace analyze` prints (the same figures as its --json, rounded for reading)."""

from __future__ import annotations

from kvbench.traces.analyze import TraceAnalysis
from kvbench.traces.sizing import TIER_NAMES


def _bytes(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_table(a: TraceAnalysis, block_bytes: float | None = None) -> str:
    """Summary, tiered LRU, reuse distance and working set, one block of lines each."""
    mean_in = a.input_tokens / a.rows if a.rows else 0.0
    mean_out = a.output_tokens / a.rows if a.rows else 0.0
    size = f" ({_bytes(a.unique_blocks * block_bytes)} of KV)" if block_bytes else ""
    lines = [
        f"trace            {a.path} ({a.format}, {a.block_tokens} tokens per block)",
        f"rows             {a.rows:,}" + (f" in {a.sessions:,} sessions" if a.sessions else ""),
        f"duration         {a.duration_s:,.1f} s",
        f"input tokens     {a.input_tokens:,} (mean {mean_in:,.1f})",
        f"output tokens    {a.output_tokens:,} (mean {mean_out:,.1f})",
        f"blocks           {a.blocks:,}, unique {a.unique_blocks:,}{size}",
        f"ideal hit rate   {_pct(a.ideal_block_hit_rate)} of blocks, {_pct(a.ideal_token_hit_rate)} of input "
        "tokens (unbounded prefix cache)",
    ]
    if a.lru is not None:
        lru = a.lru
        lines += [
            "",
            f"LRU tiers        {lru.source}; {lru.geometry}, {_bytes(lru.block_bytes)} per block",
            f"  {'tier':<5}{'capacity':>12}{'blocks':>14}{'hit blocks':>14}{'evicted':>14}",
        ]
        for name in TIER_NAMES:
            if lru.capacity_blocks[name] == 0 and lru.hit_blocks[name] == 0:
                continue
            lines.append(
                f"  {name:<5}{_bytes(lru.capacity_bytes[name]):>12}{lru.capacity_blocks[name]:>14,}"
                f"{lru.hit_blocks[name]:>14,}{lru.evicted_blocks[name]:>14,}"
            )
        lines.append(
            f"  hit rate {_pct(lru.block_hit_rate)} of blocks, {_pct(lru.token_hit_rate)} of input tokens "
            f"(ideal {_pct(a.ideal_block_hit_rate)})"
        )
    lines += ["", _reuse_line(a)]
    for b in a.reuse:
        lines.append(f"  {b['lo']:>9,} - {b['hi'] - 1:<9,} {b['reuses']:>12,}")
    lines += ["", _working_line(a, block_bytes)]
    return "\n".join(lines)


def _reuse_line(a: TraceAnalysis) -> str:
    if not a.reuse:
        return "reuse distance   no block is used twice"
    mean = f", mean {a.reuse_mean_s:,.1f} s" if a.reuse_mean_s is not None else ""
    median = a.reuse_median_requests
    return f"reuse distance   requests since the block's last use: median <= {median:,}{mean}"


def _working_line(a: TraceAnalysis, block_bytes: float | None) -> str:
    if not a.working_set:
        return "working set      empty trace"
    peak = max(a.working_set, key=lambda w: w["unique_blocks"])
    size = f" ({_bytes(peak['unique_blocks'] * block_bytes)})" if block_bytes else ""
    n = len(a.working_set)
    return (
        f"working set      {n} window{'s' if n != 1 else ''} of {a.window_s:g} s; "
        f"peak {peak['unique_blocks']:,} unique blocks{size} at {peak['start_s']:,.0f} s"
    )
