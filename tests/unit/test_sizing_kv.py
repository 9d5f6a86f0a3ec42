"""kvbench sizing: KV bytes from presets and Hugging Face config.json files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvbench.audit.commands import register
from kvbench.errors import UsageError
from kvbench.model.kv_geometry import GPT_OSS_120B
from kvbench.report.sizing import (
    geometry_from_config,
    parse_size,
    parse_tokens,
    resolve_geometry,
    sizing_table,
)

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def test_config_json_matches_preset():
    geo = resolve_geometry(CONFIGS / "gpt-oss-120b", kv_dtype="fp16")
    ref = dataclasses.replace(GPT_OSS_120B, name=geo.name)
    assert geo == ref
    assert geo.bytes_per_token() == 36_864
    assert geo.bytes_per_token(sliding_at_full=True) == 73_728


def test_config_dtype_and_pattern():
    bf16 = resolve_geometry(CONFIGS / "gpt-oss-120b" / "config.json")
    assert bf16.kv_dtype_bytes == 2.0
    gemma = resolve_geometry(CONFIGS / "tiny-gemma")
    assert gemma.head_dim == 128  # hidden_size / num_attention_heads
    assert gemma.kv_dtype_bytes == 4.0  # float32
    assert (gemma.num_sliding_layers, gemma.num_full_layers) == (10, 2)
    assert resolve_geometry(CONFIGS / "tiny-gemma", kv_dtype="fp8").kv_dtype_bytes == 1.0


def test_config_errors():
    with pytest.raises(UsageError, match="num_hidden_layers"):
        geometry_from_config({"num_attention_heads": 8}, "x")
    with pytest.raises(UsageError, match="neither a preset"):
        resolve_geometry("no-such-model")
    with pytest.raises(UsageError, match="kv-dtype"):
        resolve_geometry("gpt-oss-120b", kv_dtype="fp4x")
    with pytest.raises(UsageError, match="layer_types"):
        geometry_from_config(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "head_dim": 4,
                "layer_types": ["full_attention"],
            }
        )


def test_sizing_table_working_set():
    t = sizing_table(GPT_OSS_120B, tokens=24_000_000, capacities={"G4": parse_size("825GiB")})
    ws = t["working_set"]
    # 24M tokens need at least 184 sequences of the 131,072-token context, each holding its windows
    assert ws["sequences_at_least"] == 184
    window = 184 * GPT_OSS_120B.window_bytes_per_sequence
    assert ws["bytes"]["full_layers_only"] == pytest.approx(24e6 * 36_864 + window)
    assert ws["tiers"][0]["fits_full_layers_only"] is True
    assert ws["tiers"][0]["fits_sliding_at_full_size"] is False
    p130 = next(p for p in t["prompts"] if p["tokens"] == 130_000)
    assert p130["bytes_window"] == GPT_OSS_120B.kv_bytes(130_000)


def test_parsers():
    assert parse_tokens("24M") == 24_000_000
    assert parse_tokens("130k") == 130_000
    assert parse_size("1.5TiB") == 1.5 * 2**40
    with pytest.raises(UsageError):
        parse_size("lots")


def test_cli_sizing():
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(
        app, ["sizing", "gpt-oss-120b", "--tokens", "24000000", "--capacity", "G4=825GB"]
    )
    assert res.exit_code == 0, res.output
    for needle in ("36,864 B", "73,728 B", "824.78 GiB", "885.60 GB", "130,000 tokens", "does NOT fit"):
        assert needle in res.output
    res = CliRunner().invoke(app, ["sizing", str(CONFIGS / "tiny-gemma"), "--json"])
    assert res.exit_code == 0 and '"bytes_per_token"' in res.output


def test_explicit_path_beats_a_preset_of_the_same_name(monkeypatch):
    # tests/data/hf_configs/llama-3.1-8b is a 4-layer fp32 config, not the preset
    geo = resolve_geometry(CONFIGS / "llama-3.1-8b")
    assert (geo.num_layers, geo.kv_dtype_bytes) == (4, 4.0)
    monkeypatch.chdir(CONFIGS)
    assert resolve_geometry("llama-3.1-8b").num_layers == 4  # on disk here: the folder wins
    assert resolve_geometry("openai/gpt-oss-120b").num_layers == 36  # not on disk: the preset


def test_gemma2_alternates_sliding_and_global_layers():
    geo = resolve_geometry(CONFIGS / "tiny-gemma2")
    assert (geo.num_sliding_layers, geo.num_full_layers) == (3, 3)
    assert geo.bytes_per_token() == 3 * 2 * 4 * 64 * 2


def test_sliding_only_model_has_a_working_set():
    geo = resolve_geometry(CONFIGS / "tiny-mistral")
    assert geo.num_full_layers == 0 and geo.bytes_per_token() == 0
    ws = sizing_table(geo, tokens=1_000_000)["working_set"]
    # 1M tokens need >= 31 sequences of 32,768 tokens, each holding 4 layers x 1,024-token windows
    assert ws["bytes"]["full_layers_only"] == pytest.approx(31 * geo.window_bytes_per_sequence)
    assert ws["bytes"]["full_layers_only"] > 0


@pytest.mark.parametrize("bad", ["-5", "0", "nan", "inf", "lots"])
def test_tokens_must_be_positive(bad):
    with pytest.raises(UsageError, match="tokens"):
        parse_tokens(bad)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["sizing", "gpt-oss-120b", "--tokens", bad])
    assert isinstance(res.exception, UsageError)


def test_lengths_must_be_positive():
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["sizing", "gpt-oss-120b", "--length", "-5"])
    assert isinstance(res.exception, UsageError) and "--length" in str(res.exception)
