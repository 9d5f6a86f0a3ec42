"""KV-cache sizing: bytes per token, per prompt and per working set, in GB and GiB.

The geometry comes from a built-in preset (`kvbench.kv_geometry.PRESETS`) or a
Hugging Face ``config.json`` (a file, or a folder holding one; nothing is
downloaded):

    num_hidden_layers                       layers
    num_key_value_heads                     KV heads (default: num_attention_heads)
    head_dim                                else hidden_size / num_attention_heads
    layer_types                             "sliding_attention" / "full_attention" per layer
    sliding_window (+ sliding_window_pattern, use_sliding_window)
                                            when layer_types is absent
    torch_dtype / dtype                     KV dtype unless --kv-dtype says otherwise
    max_position_embeddings                 context length
    text_config                             used instead, for multimodal configs

Per layer and token attention keeps one key and one value vector per KV head
(2 x kv_heads x head_dim x dtype bytes). Sliding-window layers hold at most
`window` tokens, but an engine that pages KV in fixed blocks may store them at
full size: both readings are printed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.kv_geometry import PRESETS, KVGeometry

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "float32": 4.0,
    "fp16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "float8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
}

DEFAULT_LENGTHS = (30_000, 130_000)
GB = 1e9
GIB = 2.0**30


def dtype_bytes(name: str) -> float:
    key = name.strip().lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise UsageError(f"kv-dtype: unknown dtype '{name}' (known: fp16, bf16, fp8, fp32)")
    return DTYPE_BYTES[key]


def geometry_from_config(
    config: dict[str, Any], name: str = "config", kv_dtype: str | None = None
) -> KVGeometry:
    """KVGeometry from a Hugging Face config.json dict."""
    if isinstance(config.get("text_config"), dict):
        merged = dict(config["text_config"])
        for key in ("torch_dtype", "dtype"):
            merged.setdefault(key, config.get(key))
        config = merged

    def need(key: str) -> Any:
        if config.get(key) is None:
            raise UsageError(f"{name}: config has no '{key}'")
        return config[key]

    layers = int(need("num_hidden_layers"))
    heads = int(config.get("num_attention_heads") or 0)
    kv_heads = int(config.get("num_key_value_heads") or heads or 0)
    if kv_heads <= 0:
        raise UsageError(f"{name}: config has neither 'num_key_value_heads' nor 'num_attention_heads'")
    if config.get("head_dim"):
        head_dim = int(config["head_dim"])
    elif config.get("hidden_size") and heads:
        head_dim = int(config["hidden_size"]) // heads
    else:
        raise UsageError(f"{name}: config has no 'head_dim' and no 'hidden_size'/'num_attention_heads'")

    window = config.get("sliding_window")
    window = int(window) if window else None
    sliding = 0
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != layers:
            raise UsageError(f"{name}: layer_types has {len(layer_types)} entries for {layers} layers")
        sliding = sum(1 for t in layer_types if "sliding" in str(t) or "local" in str(t))
    elif window and config.get("use_sliding_window", True) is not False:
        pattern = config.get("sliding_window_pattern")
        # every pattern-th layer is global; without a pattern every layer slides
        sliding = layers - layers // pattern if isinstance(pattern, int) and pattern > 0 else layers
    if sliding == 0:
        window = None

    if kv_dtype:
        nbytes = dtype_bytes(kv_dtype)
    else:
        raw = config.get("torch_dtype") or config.get("dtype") or "float16"
        nbytes = dtype_bytes(str(raw))
    context = config.get("max_position_embeddings")
    return KVGeometry(
        name=name,
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        kv_dtype_bytes=nbytes,
        sliding_window=window,
        num_sliding_layers=sliding,
        context_length=int(context) if context else None,
    )


def resolve_geometry(model_or_config: str | Path, kv_dtype: str | None = None) -> KVGeometry:
    """A preset name, a config.json path, or a folder holding config.json."""
    key = str(model_or_config)
    short = key.split("/")[-1].lower()
    for candidate in (key, key.lower(), short):
        if candidate in PRESETS:
            geo = PRESETS[candidate]
            return dataclasses.replace(geo, kv_dtype_bytes=dtype_bytes(kv_dtype)) if kv_dtype else geo
    path = Path(key)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UsageError(
            f"model: '{key}' is neither a preset ({', '.join(sorted(PRESETS))}) nor a config.json file"
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise UsageError(f"{path}: expected a JSON object")
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return geometry_from_config(config, name=name, kv_dtype=kv_dtype)


_SIZE = re.compile(r"^\s*([0-9.]+(?:e[0-9+-]+)?)\s*([A-Za-z]*)\s*$")
_SIZE_UNITS = {
    "": 1.0,
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "pb": 1e15,
    "kib": 2.0**10,
    "mib": 2.0**20,
    "gib": 2.0**30,
    "tib": 2.0**40,
    "pib": 2.0**50,
}


def parse_size(text: str) -> float:
    """'80GB' -> 8e10, '1.5TiB' -> 1.5 * 2**40 bytes."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise UsageError(f"capacity: cannot read size '{text}' (e.g. 96GB, 1.5TiB)")
    return float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def parse_tokens(text: str) -> int:
    """'24000000', '24M', '130k' -> tokens."""
    t = text.strip().replace(",", "").replace("_", "")
    mult = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}.get(t[-1:].lower(), 1.0)
    if mult != 1.0:
        t = t[:-1]
    try:
        return int(float(t) * mult)
    except ValueError as exc:
        raise UsageError(f"tokens: cannot read '{text}'") from exc


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
        ws = {k: v * tokens for k, v in per_token.items()}
        out["working_set"] = {"tokens": tokens, "bytes": ws}
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
        lines.append(f"    full-attention layers only:  {gb_gib(ws['bytes']['full_layers_only'])}")
        lines.append(f"    sliding layers at full size: {gb_gib(ws['bytes']['sliding_at_full_size'])}")
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
