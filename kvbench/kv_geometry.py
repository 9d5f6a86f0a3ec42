"""Moved to `kvbench.model.kv_geometry`; this re-export keeps old imports working for one release."""

from kvbench.model.kv_geometry import GPT_OSS_20B, GPT_OSS_120B, LLAMA_3_1_8B, PRESETS, KVGeometry

__all__ = ["GPT_OSS_20B", "GPT_OSS_120B", "LLAMA_3_1_8B", "PRESETS", "KVGeometry"]
