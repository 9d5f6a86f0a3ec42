"""KV-cache geometry of a model: how many bytes one token's keys and values take.

Shared by the mock (to size tiers and transfers), the sizing tables and the audit.
Pure data and arithmetic: no I/O, no kvbench imports.

Per layer and token, attention keeps one key and one value vector per KV head:
    2 * num_kv_heads * head_dim * kv_dtype_bytes
A sliding-window layer only ever needs the last `sliding_window` tokens, so for
a prompt of n tokens it holds min(n, window) tokens; engines that page KV in
fixed blocks may still store it at full size, hence `sliding_at_full`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVGeometry:
    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: float
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    context_length: int | None = None

    @property
    def bytes_per_token_per_layer(self) -> float:
        return 2 * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def num_full_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    def bytes_per_token(self, sliding_at_full: bool = False) -> float:
        """Marginal bytes per token for a long prompt (past the window)."""
        layers = self.num_layers if sliding_at_full else self.num_full_layers
        return layers * self.bytes_per_token_per_layer

    @property
    def window_bytes_per_sequence(self) -> float:
        """Bytes the sliding layers hold for one long sequence (their window), on top of bytes_per_token."""
        if not self.num_sliding_layers or not self.sliding_window:
            return 0.0
        return self.num_sliding_layers * self.sliding_window * self.bytes_per_token_per_layer

    def kv_bytes(self, tokens: int, sliding_at_full: bool = False) -> float:
        """Bytes of KV for one sequence of `tokens` tokens."""
        per_layer = self.bytes_per_token_per_layer
        full = self.num_full_layers * tokens * per_layer
        if self.num_sliding_layers == 0:
            return full
        kept = tokens if sliding_at_full or self.sliding_window is None else min(tokens, self.sliding_window)
        return full + self.num_sliding_layers * kept * per_layer


GPT_OSS_120B = KVGeometry(
    name="gpt-oss-120b",
    num_layers=36,
    num_kv_heads=8,
    head_dim=64,
    kv_dtype_bytes=2.0,  # FP16 KV cache, as in the published G4 test
    sliding_window=128,
    num_sliding_layers=18,
    context_length=131_072,
)

GPT_OSS_20B = KVGeometry(
    name="gpt-oss-20b",
    num_layers=24,
    num_kv_heads=8,
    head_dim=64,
    kv_dtype_bytes=2.0,
    sliding_window=128,
    num_sliding_layers=12,
    context_length=131_072,
)

LLAMA_3_1_8B = KVGeometry(
    name="llama-3.1-8b",
    num_layers=32,
    num_kv_heads=8,
    head_dim=128,
    kv_dtype_bytes=2.0,
    context_length=131_072,
)

PRESETS: dict[str, KVGeometry] = {g.name: g for g in (GPT_OSS_120B, GPT_OSS_20B, LLAMA_3_1_8B)}
