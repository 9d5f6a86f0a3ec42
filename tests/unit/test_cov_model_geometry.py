"""KV geometry from a config.json, inline fields or a preset: the sliding-window rules by model
family, every refusal one line naming the field, and bytes per token worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbench.errors import UsageError
from kvbench.model.geometry import (
    dtype_bytes,
    geometry_for_target,
    geometry_from_config,
    geometry_from_fields,
    resolve_geometry,
)
from kvbench.model.kv_geometry import PRESETS


def _cfg(**over: Any) -> dict[str, Any]:
    base = {"num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 32}
    return {**base, **over}


def test_bytes_per_token_by_hand() -> None:
    geo = geometry_from_config(_cfg(torch_dtype="bfloat16"))
    # K and V, 4 KV heads x 32 dims x 2 bytes, 8 layers
    assert geo.bytes_per_token() == 2 * 4 * 32 * 2 * 8
    assert geo.kv_bytes(100) == 100 * geo.bytes_per_token()
    assert geo.sliding_window is None and geo.num_sliding_layers == 0


def test_head_dim_from_hidden_size_and_kv_heads_default_to_attention_heads() -> None:
    geo = geometry_from_config({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512})
    assert geo.head_dim == 64 and geo.num_kv_heads == 8
    assert geo.kv_dtype_bytes == 2.0  # float16 when the config says nothing


def test_kv_dtype_wins_over_the_config_and_torch_prefix_is_read() -> None:
    assert geometry_from_config(_cfg(torch_dtype="torch.float32")).kv_dtype_bytes == 4.0
    assert geometry_from_config(_cfg(torch_dtype="float32"), kv_dtype="fp8").kv_dtype_bytes == 1.0
    assert dtype_bytes(" BF16 ") == 2.0
    with pytest.raises(UsageError, match="unknown dtype 'int3'"):
        dtype_bytes("int3")


def test_multimodal_text_config_is_read_with_the_outer_dtype() -> None:
    geo = geometry_from_config({"text_config": _cfg(), "torch_dtype": "float32"})
    assert geo.num_layers == 8 and geo.kv_dtype_bytes == 4.0


@pytest.mark.parametrize(
    ("extra", "sliding"),
    [
        ({"layer_types": ["sliding_attention", "full_attention"] * 4}, 4),
        ({"layer_types": ["local", "global", "global", "global"] * 2}, 2),
        ({"sliding_window": 256, "sliding_window_pattern": 4}, 6),  # every 4th global
        ({"sliding_window": 256, "model_type": "gemma2"}, 4),  # alternate
        ({"sliding_window": 256}, 8),  # Mistral: every layer slides
        ({"sliding_window": 256, "use_sliding_window": False}, 0),
        ({}, 0),
    ],
)
def test_sliding_layers_by_family(extra: dict[str, Any], sliding: int) -> None:
    geo = geometry_from_config(_cfg(**extra))
    assert geo.num_sliding_layers == sliding
    assert geo.num_full_layers == 8 - sliding
    if sliding == 0:
        assert geo.sliding_window is None  # a window no layer uses is dropped


def test_sliding_layers_hold_only_their_window() -> None:
    geo = geometry_from_config(_cfg(sliding_window=100, sliding_window_pattern=2))
    per_layer = 2 * 4 * 32 * 2
    assert geo.num_sliding_layers == 4
    # 1000 tokens: 4 full layers keep all, 4 sliding layers keep 100
    assert geo.kv_bytes(1000) == per_layer * (4 * 1000 + 4 * 100)
    assert geo.kv_bytes(1000, sliding_at_full=True) == per_layer * 8 * 1000
    assert geo.kv_bytes(50) == per_layer * 8 * 50  # inside the window every layer keeps all
    # the marginal cost past the window is the full layers only
    assert geo.kv_bytes(2001) - geo.kv_bytes(2000) == geo.bytes_per_token()
    assert geo.window_bytes_per_sequence == 4 * 100 * per_layer


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"num_attention_heads": 8, "head_dim": 8}, "config has no 'num_hidden_layers'"),
        (_cfg(num_hidden_layers="many"), "non-number where a count belongs"),
        (_cfg(num_hidden_layers=0), "num_hidden_layers must be positive"),
        ({"num_hidden_layers": 2, "head_dim": 8}, "neither 'num_key_value_heads' nor 'num_attention_heads'"),
        ({"num_hidden_layers": 2, "num_key_value_heads": 2}, "no 'head_dim' and no 'hidden_size'"),
        (_cfg(layer_types=["full_attention"] * 3), "layer_types has 3 entries for 8 layers"),
    ],
)
def test_config_refusals_name_the_field(config: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        geometry_from_config(config, name="m")


def test_inline_fields_round_trip_and_refusals() -> None:
    fields = {"num_layers": 4, "num_kv_heads": 2, "head_dim": 16, "kv_dtype_bytes": 1.0}
    geo = geometry_from_fields(fields)
    assert geo.bytes_per_token() == 2 * 2 * 16 * 1.0 * 4
    bad = [
        ({**fields, "layers": 3}, "unknown field"),
        ({"num_layers": 4}, "model.geometry:"),
        ({**fields, "num_layers": 0}, r"num_layers: expected a whole number >= 1"),
        ({**fields, "head_dim": True}, r"head_dim: expected a whole number"),
        ({**fields, "sliding_window": 0}, r"sliding_window: expected a whole number >= 1"),
        ({**fields, "kv_dtype_bytes": 32}, r"kv_dtype_bytes: expected a number of bytes in \(0, 16\]"),
        ({**fields, "num_sliding_layers": 5}, "more sliding layers than layers"),
    ]
    for f, message in bad:
        with pytest.raises(UsageError, match=message):
            geometry_from_fields(f)


def test_resolve_prefers_a_file_then_a_preset(tmp_path: Path) -> None:
    folder = tmp_path / "gpt-oss-20b"  # a preset's name, but on disk: the file wins
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_cfg()))
    assert resolve_geometry(folder).num_layers == 8
    assert resolve_geometry("gpt-oss-20b", base_dir=tmp_path).name == "gpt-oss-20b"
    assert resolve_geometry("gpt-oss-20b", base_dir=tmp_path).num_layers == 8
    # off disk: the preset, by name or Hugging Face id
    assert resolve_geometry("openai/GPT-OSS-20B") == PRESETS["gpt-oss-20b"]
    assert resolve_geometry("llama-3.1-8b", kv_dtype="fp8").kv_dtype_bytes == 1.0
    assert resolve_geometry({"num_layers": 1, "num_kv_heads": 1, "head_dim": 1, "kv_dtype_bytes": 2.0},
                            kv_dtype="fp32").kv_dtype_bytes == 4.0  # fmt: skip
    with pytest.raises(UsageError, match="neither a preset"):
        resolve_geometry("no-such-model")


def test_bad_config_files_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        resolve_geometry(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(UsageError, match="expected a JSON object"):
        resolve_geometry(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not JSON"):
        resolve_geometry(bad)


def test_geometry_for_target_order() -> None:
    fields = {"num_layers": 2, "num_kv_heads": 1, "head_dim": 4, "kv_dtype_bytes": 2.0}
    geo, src = geometry_for_target("gpt-oss-120b", "mock profile", "llama-3.1-8b", "x")
    assert geo == PRESETS["gpt-oss-120b"] and src == "mock profile (gpt-oss-120b)"
    geo, src = geometry_for_target(fields, "mock profile", None, "x")
    assert geo is not None and geo.name == "mock-profile" and src == "mock profile"
    # broken profile fields fall through to the user's preset
    geo, src = geometry_for_target({"bogus": 1}, "mock profile", "llama-3.1-8b", "x")
    assert geo == PRESETS["llama-3.1-8b"] and src == "--geometry llama-3.1-8b"
    geo, src = geometry_for_target(None, "p", None, "meta/Llama-3.1-8B")
    assert geo == PRESETS["llama-3.1-8b"] and "target.model" in src
    assert geometry_for_target(None, "p", None, "unknown") == (None, "tokens (no geometry known)")
