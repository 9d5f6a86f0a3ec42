"""KV-cache sizing tables: bytes per token, per prompt and per working set, in GB and GiB.

The geometry comes from `kvbench.model.geometry.resolve_geometry` (a config.json path or
folder, a preset, nothing downloaded; its docstring lists the config.json fields read).
Per layer and token attention keeps one key and one value vector per KV head
(2 x kv_heads x head_dim x dtype bytes). Sliding-window layers hold at most `window`
tokens per sequence, but an engine that pages KV in fixed blocks may store them at full
size: both readings are printed. A working set counts the window bytes of its sequences
too, so a model whose layers all slide is not sized at 0 B.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kvbench.errors import UsageError
from kvbench.model.geometry import dtype_bytes, geometry_from_config, resolve_geometry
from kvbench.model.kv_geometry import KVGeometry
from kvbench.model.sizes import parse_size

# re-exported from kvbench.model
__all__ = [
    "dtype_bytes",
    "geometry_from_config",
    "parse_size",
    "resolve_geometry",
]  # re-exported from kvbench.model

DEFAULT_LENGTHS = (30_000, 130_000)
GB = 1e9
GIB = 2.0**30


def parse_tokens(text: str) -> int:
    """'24000000', '24M', '130k' -> tokens (a positive, finite count)."""
    t = text.strip().replace(",", "").replace("_", "")
    mult = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}.get(t[-1:].lower(), 1.0)
    if mult != 1.0:
        t = t[:-1]
    try:
        value = float(t) * mult
    except ValueError:
        raise UsageError(f"tokens: cannot read '{text}' (e.g. 24000000, 24M, 130k)") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"tokens: '{text}' is not a positive number of tokens")
    return int(value)


def sizing_table(
    geo: KVGeometry,
    lengths: tuple[int, ...] = DEFAULT_LENGTHS,
    tokens: int | None = None,
    capacities: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Per-token, per-prompt and working-set KV sizes for one geometry (a plain dict)."""
    per_token = {
        "full_layers_only": geo.bytes_per_token(sliding_at_full=False),
        "sliding_at_full_size": geo.bytes_per_token(sliding_at_full=True),
    }
    prompts = [
        {
            "tokens": n,
            "bytes_window": geo.kv_bytes(n, sliding_at_full=False),
            "bytes_sliding_full": geo.kv_bytes(n, sliding_at_full=True),
            "exceeds_context": bool(geo.context_length and n > geo.context_length),
        }
        for n in lengths
    ]
    out: dict[str, Any] = {
        "model": geo.name,
        "geometry": dataclasses.asdict(geo),
        "bytes_per_token_per_layer": geo.bytes_per_token_per_layer,
        "bytes_per_token": per_token,
        "prompts": prompts,
    }
    if tokens is not None:
        sequences = max(1, math.ceil(tokens / geo.context_length)) if geo.context_length else 1
        window = geo.window_bytes_per_sequence * sequences
        ws = {
            "full_layers_only": per_token["full_layers_only"] * tokens + window,
            "sliding_at_full_size": per_token["sliding_at_full_size"] * tokens,
        }
        out["working_set"] = {
            "tokens": tokens,
            "bytes": ws,
            "sequences_at_least": sequences,
            "window_bytes": window,
        }
        if capacities:
            out["working_set"]["tiers"] = [
                {
                    "tier": name,
                    "capacity_bytes": cap,
                    "fits_full_layers_only": ws["full_layers_only"] <= cap,
                    "fits_sliding_at_full_size": ws["sliding_at_full_size"] <= cap,
                    "fraction_full_layers_only": ws["full_layers_only"] / cap if cap else None,
                    "fraction_sliding_at_full_size": ws["sliding_at_full_size"] / cap if cap else None,
                }
                for name, cap in capacities.items()
            ]
    return out


def gb_gib(nbytes: float) -> str:
    return f"{nbytes / GB:,.2f} GB = {nbytes / GIB:,.2f} GiB"


def format_sizing(table: dict[str, Any]) -> str:
    g = table["geometry"]
    lines = [f"KV-cache sizing for {table['model']}"]
    window = f", window {g['sliding_window']}" if g["sliding_window"] else ""
    lines.append(
        f"  geometry: {g['num_layers']} layers ({g['num_sliding_layers']} sliding{window}), "
        f"{g['num_kv_heads']} KV heads x head dim {g['head_dim']}, {g['kv_dtype_bytes']:g} B per value"
        + (f", context {g['context_length']:,}" if g["context_length"] else "")
    )
    lines.append(
        f"  per token and layer: 2 (K,V) x {g['num_kv_heads']} x {g['head_dim']} x {g['kv_dtype_bytes']:g} B"
        f" = {table['bytes_per_token_per_layer']:,.0f} B"
    )
    bpt = table["bytes_per_token"]
    full_layers = g["num_layers"] - g["num_sliding_layers"]
    lines.append("  per token:")
    lines.append(
        f"    full-attention layers only ({full_layers}):  {bpt['full_layers_only']:>12,.0f} B"
        f"  ({bpt['full_layers_only'] / 1024:,.1f} KiB)"
    )
    lines.append(
        f"    sliding layers at full size ({g['num_layers']}): {bpt['sliding_at_full_size']:>12,.0f} B"
        f"  ({bpt['sliding_at_full_size'] / 1024:,.1f} KiB)"
    )
    lines.append("  per prompt:")
    for p in table["prompts"]:
        note = "  (exceeds the context length)" if p["exceeds_context"] else ""
        lines.append(
            f"    {p['tokens']:>9,} tokens: {gb_gib(p['bytes_window'])} (sliding layers keep the window)"
        )
        lines.append(
            f"    {'':>9}         {gb_gib(p['bytes_sliding_full'])} (sliding layers at full size){note}"
        )
    ws = table.get("working_set")
    if ws:
        lines.append(f"  working set of {ws['tokens']:,} tokens:")
        if ws["window_bytes"]:
            lines.append(
                f"    (sliding layers hold their window in each sequence: {gb_gib(ws['window_bytes'])} "
                f"for at least {ws['sequences_at_least']:,} sequence(s) of at most the context length)"
            )
        lines.append(f"    sliding layers keep the window: {gb_gib(ws['bytes']['full_layers_only'])}")
        lines.append(f"    sliding layers at full size:    {gb_gib(ws['bytes']['sliding_at_full_size'])}")
        for t in ws.get("tiers", []):
            fit_a = "fits" if t["fits_full_layers_only"] else "does NOT fit"
            fit_b = "fits" if t["fits_sliding_at_full_size"] else "does NOT fit"
            lines.append(f"    tier {t['tier']} ({gb_gib(t['capacity_bytes'])}):")
            lines.append(
                f"      full-attention layers only:  {t['fraction_full_layers_only']:.0%} of it, {fit_a}"
            )
            lines.append(
                f"      sliding layers at full size: {t['fraction_sliding_at_full_size']:.0%} of it, {fit_b}"
            )
    return "\n".join(lines)
