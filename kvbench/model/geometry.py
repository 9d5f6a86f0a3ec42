"""One resolver for a model's KV geometry: preset, config.json, inline fields or a run manifest.

Used by `kvbench sizing`, the audit's `model.geometry` and the report's fits, so that the three
read a model the same way. Nothing is downloaded.

Order: an existing path (a config.json, or a folder holding one) wins over a preset of the
same name, so `tests/data/hf_configs/gpt-oss-120b` is read from disk; a bare name or a
Hugging Face id (`openai/gpt-oss-120b`) that is not on disk is looked up among the presets.
A relative path is taken against `base_dir` (the claims file's folder) when one is given.

From a Hugging Face config.json (or its `text_config`, for multimodal configs):

    num_hidden_layers                       layers
    num_key_value_heads                     KV heads (default: num_attention_heads)
    head_dim                                else hidden_size / num_attention_heads
    layer_types                             "sliding_attention" / "full_attention" per layer
    sliding_window (+ sliding_window_pattern, use_sliding_window)
                                            when layer_types is absent: every pattern-th layer
                                            is global; Gemma-2 (model_type gemma2, no pattern)
                                            alternates sliding and global; otherwise
                                            (Mistral-style) every layer slides
    torch_dtype / dtype                     KV dtype unless a kv_dtype is given
    max_position_embeddings                 context length
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from kvbench.errors import UsageError
from kvbench.model.kv_geometry import PRESETS, KVGeometry

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

_GEOMETRY_FIELDS = {f.name for f in dataclasses.fields(KVGeometry)}


def dtype_bytes(name: str) -> float:
    key = name.strip().lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise UsageError(f"kv-dtype: unknown dtype '{name}' (known: fp16, bf16, fp8, fp32)")
    return DTYPE_BYTES[key]


def _sliding_layers(config: dict[str, Any], layers: int, window: int | None) -> int:
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return sum(1 for t in layer_types if "sliding" in str(t) or "local" in str(t))
    if not window or config.get("use_sliding_window", True) is False:
        return 0
    pattern = config.get("sliding_window_pattern")
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return layers - layers // pattern  # every pattern-th layer is global
    if str(config.get("model_type", "")).startswith("gemma2"):
        return (layers + 1) // 2  # Gemma-2: even layers slide, odd layers are global
    return layers  # Mistral-style: every layer slides


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

    try:
        layers = int(need("num_hidden_layers"))
        heads = int(config.get("num_attention_heads") or 0)
        kv_heads = int(config.get("num_key_value_heads") or heads or 0)
        head_dim_raw = config.get("head_dim")
        window_raw = config.get("sliding_window")
        window = int(window_raw) if window_raw else None
        context = config.get("max_position_embeddings")
        context_len = int(context) if context else None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{name}: config holds a non-number where a count belongs ({exc})") from None
    if layers <= 0:
        raise UsageError(f"{name}: num_hidden_layers must be positive")
    if kv_heads <= 0:
        raise UsageError(f"{name}: config has neither 'num_key_value_heads' nor 'num_attention_heads'")
    if head_dim_raw:
        head_dim = int(head_dim_raw)
    elif config.get("hidden_size") and heads:
        head_dim = int(config["hidden_size"]) // heads
    else:
        raise UsageError(f"{name}: config has no 'head_dim' and no 'hidden_size'/'num_attention_heads'")
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types and len(layer_types) != layers:
        raise UsageError(f"{name}: layer_types has {len(layer_types)} entries for {layers} layers")
    sliding = _sliding_layers(config, layers, window)
    if sliding == 0:
        window = None
    raw = config.get("torch_dtype") or config.get("dtype") or "float16"
    nbytes = dtype_bytes(kv_dtype) if kv_dtype else dtype_bytes(str(raw))
    return KVGeometry(
        name=name,
        num_layers=layers,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        kv_dtype_bytes=nbytes,
        sliding_window=window,
        num_sliding_layers=sliding,
        context_length=context_len,
    )


def geometry_from_fields(fields: dict[str, Any], name: str = "inline") -> KVGeometry:
    """KVGeometry from inline fields (a claims file's `model.geometry` mapping, a mock profile)."""
    unknown = sorted(set(fields) - _GEOMETRY_FIELDS)
    if unknown:
        raise UsageError(
            f"model.geometry: unknown field(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(_GEOMETRY_FIELDS))})"
        )
    try:
        geo = KVGeometry(**{"name": name, **fields})
    except TypeError as exc:
        raise UsageError(f"model.geometry: {exc}") from None
    counts = {"num_layers": 1, "num_kv_heads": 1, "head_dim": 1, "num_sliding_layers": 0}
    for key, least in counts.items():
        v = getattr(geo, key)
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise UsageError(f"model.geometry.{key}: expected a whole number >= {least}, got {v!r}")
    for key in ("sliding_window", "context_length"):
        v = getattr(geo, key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise UsageError(f"model.geometry.{key}: expected a whole number >= 1, got {v!r}")
    v = geo.kv_dtype_bytes
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 16:
        raise UsageError(f"model.geometry.kv_dtype_bytes: expected a number of bytes in (0, 16], got {v!r}")
    if geo.num_sliding_layers > geo.num_layers:
        raise UsageError("model.geometry.num_sliding_layers: more sliding layers than layers")
    return geo


def _preset(key: str) -> KVGeometry | None:
    for candidate in (key, key.lower(), key.split("/")[-1].lower()):
        if candidate in PRESETS:
            return PRESETS[candidate]
    return None


def resolve_geometry(
    spec: str | Path | dict[str, Any], kv_dtype: str | None = None, base_dir: Path | None = None
) -> KVGeometry:
    """A config.json path or folder (wins when it exists), a preset name, or inline fields."""
    if isinstance(spec, dict):
        geo = geometry_from_fields(spec)
        return dataclasses.replace(geo, kv_dtype_bytes=dtype_bytes(kv_dtype)) if kv_dtype else geo
    key = str(spec)
    path = Path(key).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return _read_config(path, kv_dtype)
    preset = _preset(key)
    if preset is None:
        raise UsageError(
            f"model: '{key}' is neither a preset ({', '.join(sorted(PRESETS))}) nor a config.json file"
        )
    return dataclasses.replace(preset, kv_dtype_bytes=dtype_bytes(kv_dtype)) if kv_dtype else preset


def _read_config(path: Path, kv_dtype: str | None) -> KVGeometry:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: expected a JSON object")
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return geometry_from_config(config, name=name, kv_dtype=kv_dtype)


def geometry_for_target(
    profile_geometry: str | dict[str, Any] | None, where: str, preset: str | None, model: str
) -> tuple[KVGeometry | None, str]:
    """A run's KV geometry and where it came from (None, "tokens" when unknown).

    The mock profile's geometry (a preset name or fields) wins, else the user's `preset` (a preset
    or config.json), else the target model name when it is a preset. Reading these from a run's
    manifest is the report's job (`kvbench.report.core.manifest`).
    """
    if isinstance(profile_geometry, str) and profile_geometry in PRESETS:
        return PRESETS[profile_geometry], f"{where} ({profile_geometry})"
    if isinstance(profile_geometry, dict):
        try:
            return geometry_from_fields(profile_geometry, "mock-profile"), where
        except UsageError:
            pass
    if preset:
        return resolve_geometry(preset), f"--geometry {preset}"
    short = model.split("/")[-1].lower()
    if short in PRESETS:
        return PRESETS[short], f"preset matching target.model ({model})"
    return None, "tokens (no geometry known)"
