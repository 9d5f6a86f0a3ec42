"""Tier capacities for the LRU simulation: bytes per tier, and bytes per block from a model.

`--tiers G1=80GB,G2=1TB` names tiers G1..G4 (any subset, any order; the missing ones hold
nothing); a mock profile gives its enabled tiers' capacity_bytes, its geometry and its own block
size. Bytes become blocks through kvbench's KV sizing (model.kv_geometry): one block of
`block_tokens` tokens takes bytes_per_token * block_tokens, as the mock sizes its tiers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.errors import UsageError
from kvbench.model.geometry import resolve_geometry
from kvbench.model.kv_geometry import KVGeometry
from kvbench.model.sizes import parse_size

TIER_NAMES = ("G1", "G2", "G3", "G4")


@dataclass(frozen=True)
class TierPlan:
    """What the LRU simulation needs: per-tier capacities and where they came from."""

    capacity_bytes: dict[str, float]  # G1..G4; 0 = holds nothing
    block_bytes: float
    geometry: str
    source: str

    def capacity_blocks(self) -> list[int]:
        return [int(self.capacity_bytes.get(n, 0.0) // self.block_bytes) for n in TIER_NAMES]


def parse_tiers(text: str) -> dict[str, float]:
    """'G1=80GB,G2=1TB' -> {'G1': 8e10, 'G2': 1e12}."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, size = part.partition("=")
        name = name.strip().upper()
        if not sep or name not in TIER_NAMES:
            raise UsageError(f"--tiers: {part!r} is not TIER=SIZE with TIER one of {', '.join(TIER_NAMES)}")
        if name in out:
            raise UsageError(f"--tiers: {name} given twice")
        out[name] = parse_size(size, f"--tiers {name}")
    if not out:
        raise UsageError("--tiers: no tiers given (e.g. G1=80GB,G2=1TB)")
    return out


def block_bytes(geo: KVGeometry, block_tokens: int, sliding_at_full: bool = False) -> float:
    return geo.bytes_per_token(sliding_at_full) * block_tokens


def plan_from_tiers(text: str, model: str, block_tokens: int) -> TierPlan:
    geo = resolve_geometry(model)
    return TierPlan(parse_tiers(text), block_bytes(geo, block_tokens), geo.name, f"--tiers {text}")


def plan_from_profile(name: str, block_tokens: int) -> TierPlan:
    """A mock profile's enabled tiers and geometry, sized in blocks of the trace's `block_tokens`
    (the profile's own, usually smaller, block only decides alignment, which the replay reports)."""
    from kvbench.mock.config import TieredProfile
    from kvbench.mock.profiles import load_profile
    from kvbench.model.kv_geometry import PRESETS

    profile = load_profile(name)
    if not isinstance(profile, TieredProfile):
        raise UsageError(f"--mock-profile: {name!r} is a {profile.kind} profile; it has no cache tiers")
    geo = PRESETS[profile.geometry]
    tiers = {n: profile.tiers.by_name(n) for n in TIER_NAMES}
    capacities = {n: (t.capacity_bytes if t.enabled else 0.0) for n, t in tiers.items()}
    per_block = block_bytes(geo, block_tokens, profile.sliding_at_full)
    return TierPlan(capacities, per_block, geo.name, f"mock profile {name}")
