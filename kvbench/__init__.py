"""kvbench: benchmark LLM inference servers with KV-cache offload (G1-G4 tiers)."""

__version__ = "0.1.0"
