"""Tier sizes for the tier-cliff map's prediction on any server: `--tiers`, or what the engine's
adapter reads from the server (vLLM's cache_config_info, llama.cpp's /props), and the boundary in
working-set tokens each size implies.

`--tiers G1=SIZE,G2=SIZE,...,kv=PER_TOKEN`. A SIZE with a byte unit (it ends in B: 4096B, 64MiB,
2GB) is bytes; `Nslots` is N whole sequences, one prompt each (llama.cpp's -np); anything else is
tokens, as in --over working_set (16k, 16Ki, 20000). Bytes become tokens through `kv=`: the KV bytes
one token takes (4KiB), or a model it is computed from (a preset name or a config.json path); the
embedded mock's profile gives its own.

A tier holds whole prompts with their generated tokens: a prompt of P tokens that generates g
keeps P + g tokens (llama.cpp's saved slot state), so a tier of T tokens keeps floor(T / (P + g))
prompts, and its boundary is that many prompts x P tokens of working set. A tier that pages in
blocks (vLLM) keeps only a prompt's full blocks, floor((P + g - 1) / block) (the last token's KV
is never computed): its partial tail block goes back to the FRONT of the free queue and is the
next request's first (vllm/v1/core/block_pool.py free_blocks: LIFO reuse of uncached blocks), so
one block is always in flight. The oldest prompt loses its tail blocks first, and its warm
request needs only floor((P - 1) / block) of them (the last prompt token is always computed), so
n prompts are kept whole while (n - 1) x full + needed + 1 <= T / block. Past that, a partial
hit, then none.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvbench.engines.adapters import TierCapacity, get_adapter
from kvbench.errors import KvbenchError, UsageError
from kvbench.model.sizes import parse_size

TIER_NAMES = ("G1", "G2", "G3", "G4")
FLAG = "--tiers"


@dataclass(frozen=True)
class TierSpec:
    """What `--tiers` says: sizes by tier and the KV bytes per token that turn bytes into tokens."""

    capacities: tuple[TierCapacity, ...] = ()
    kv_bytes_per_token: float | None = None
    kv_source: str = ""


def parse_tokens(text: str) -> int:
    """'16k' -> 16000, '16Ki' -> 16384, '20000' -> 20000."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(k|Ki|M|Mi)?\s*", text)
    if not m:
        raise UsageError(f"--over working_set={text}: expected tokens, e.g. 16k, 16Ki or 20000")
    scale = {None: 1, "k": 1000, "Ki": 1024, "M": 1_000_000, "Mi": 1 << 20}[m.group(2)]
    return int(float(m.group(1)) * scale)


def _kv_per_token(text: str) -> tuple[float, str]:
    if re.fullmatch(r"\s*[0-9.]+\s*[A-Za-z]*[Bb]\s*", text):
        value = parse_size(text, f"{FLAG} kv")
        if value <= 0:
            raise UsageError(f"{FLAG} kv={text}: KV bytes per token must be above 0")
        return value, f"kv={text} per token"
    from kvbench.model.geometry import resolve_geometry

    try:
        geo = resolve_geometry(text)
    except UsageError as exc:
        raise UsageError(f"{FLAG} kv={text}: not a size in bytes (4KiB) and {exc.lines()[0]}") from None
    return geo.bytes_per_token(), f"kv from {geo.name}: {geo.bytes_per_token():,.0f} B per token"


def parse_capacity(tier: str, text: str) -> TierCapacity:
    """One `G1=...` value: bytes (a unit ending in B), slots (Nslots) or tokens."""
    where = f"{FLAG} {tier}={text}"
    value = text.strip()
    if m := re.fullmatch(r"(\d+)\s*slots?", value):
        if int(m.group(1)) < 1:
            raise UsageError(f"{where}: at least 1 slot")
        return TierCapacity(tier, sequences=int(m.group(1)), source=f"{FLAG} {tier}={value}")
    if re.fullmatch(r"[0-9.]+\s*[A-Za-z]*[Bb]", value):
        return TierCapacity(tier, bytes=parse_size(value, where), source=f"{FLAG} {tier}={value}")
    try:
        tokens = parse_tokens(value)
    except UsageError:
        raise UsageError(
            f"{where}: expected bytes (64MiB, 2GB), tokens (16k, 20000) or slots (4slots)"
        ) from None
    return TierCapacity(tier, tokens=tokens, source=f"{FLAG} {tier}={value}")


def parse_tiers(text: str | None) -> TierSpec:
    """`G1=2048,G2=16MiB,kv=4KiB` -> a TierSpec; a one-line UsageError naming the bad entry."""
    if not text:
        return TierSpec()
    caps: dict[str, TierCapacity] = {}
    kv: tuple[float, str] | None = None
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not value.strip():
            raise UsageError(f"{FLAG} {item}: expected TIER=SIZE (e.g. G1=64MiB) or kv=BYTES")
        if key == "kv":
            kv = _kv_per_token(value.strip())
        elif key.upper() in TIER_NAMES:
            caps[key.upper()] = parse_capacity(key.upper(), value)
        else:
            raise UsageError(f"{FLAG} {item}: {key} is not a tier ({', '.join(TIER_NAMES)}) or kv")
    ordered = tuple(caps[t] for t in TIER_NAMES if t in caps)
    return TierSpec(ordered, kv[0] if kv else None, kv[1] if kv else "")


def merge(reported: list[TierCapacity], spec: TierSpec) -> list[TierCapacity]:
    """The adapter's tiers with --tiers on top (the user's figure wins), fastest first."""
    out = {c.tier: c for c in reported}
    for cap in spec.capacities:
        known = out.get(cap.tier)
        block = known.block_tokens if known is not None else 1  # the engine's block, where it said
        out[cap.tier] = replace(cap, block_tokens=block)
    return [out[t] for t in TIER_NAMES if t in out]


def boundary_tokens(
    cap: TierCapacity, prompt_tokens: int, output_tokens: int, kv_bytes_per_token: float | None
) -> int | None:
    """The largest working set (whole prompts x prompt_tokens) `cap` still holds; None when it
    cannot be sized (bytes without KV bytes per token)."""
    footprint = prompt_tokens + output_tokens
    if cap.sequences is not None:
        fits = cap.tokens is None or footprint <= cap.tokens
        return cap.sequences * prompt_tokens if fits else 0
    tokens = cap.tokens
    if tokens is None and cap.bytes is not None and kv_bytes_per_token:
        tokens = cap.bytes / kv_bytes_per_token
    if tokens is None:
        return None
    block = max(1, cap.block_tokens)
    if block == 1:
        return int(tokens // footprint) * prompt_tokens
    full, needed = max(1, (footprint - 1) // block), (prompt_tokens - 1) // block
    spare = int(tokens // block) - 1 - needed  # blocks left for the other prompts' full blocks
    return (spare // full + 1) * prompt_tokens if spare >= 0 else 0


def fetch_answers(base_url: str, paths: tuple[str, ...], headers: Mapping[str, str]) -> dict[str, str]:
    """GET each path (a few ms, between sweep points: nothing else is running); a path that fails
    is left out, so the prediction falls back to --tiers."""
    out: dict[str, str] = {}
    for path in paths:
        req = urllib.request.Request(base_url.rstrip("/") + path, headers=dict(headers))
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                out[path] = resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return out


def reported_capacities(scn: Any, engine: str | None) -> list[TierCapacity]:
    """What the server's adapter says each tier holds ([] for the mock, an unknown engine or no answer)."""
    base_url = scn.target.base_url
    if base_url is None or not engine:
        return []
    try:
        adapter = get_adapter(engine)
    except KvbenchError:
        return []
    if not adapter.capacity_paths:
        return []
    from kvbench.run.preflight.target import request_headers

    try:
        headers = request_headers(scn, None)
    except KvbenchError:
        headers = dict(scn.target.headers)
    return adapter.tier_capacities(fetch_answers(base_url, adapter.capacity_paths, headers))
