"""The hit-rate dial (`prompts.reuse.hit_rate`): prime, measure, validate.

Each measured prompt is its first round(hit_rate x n) tokens (the primed prefix, run salt
included) followed by a fresh suffix that opens with six random words drawn per request, so no
block past the prefix can match anything: not an earlier request, not the prime. The prime step
sends each prefix once after the verified cold start (the cold reset already emptied the cache,
so nothing else can hit). An engine caches whole blocks and always recomputes a prompt's last
token, so the EXPECTED hit is the prefix rounded down to whole blocks, and at most the blocks
before the last token: min(floor(P/b), floor((n-1)/b)) x b. That, not the requested share, is what
the measured ratios (usage.cached_tokens and the /metrics hit counters) are held to.

Lengths are in words, one token each (the prompt vocabulary's words are single tokens; the mock's
tokenizer counts exactly that); a real tokenizer that merges words shows up in the measured ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.client import RequestRecord
from kvbench.load.prompts import SALT_WORDS, Prompt, make_salt
from kvbench.scenario import Scenario


@dataclass(frozen=True)
class Dial:
    hit_rate: float
    tolerance: float
    block_tokens: int
    block_source: str

    def split(self, prompt: Prompt, salt: str) -> tuple[list[str], int]:
        """The prompt's words (salt first) and how many of them form the primed prefix."""
        words = prompt.with_salt(salt).split()
        return words, round(self.hit_rate * len(words))

    def expected_cached(self, n: int, prefix: int) -> int:
        b = self.block_tokens
        return min(prefix // b, max(0, n - 1) // b) * b

    def prime_text(self, prompt: Prompt, salt: str) -> str:
        words, prefix = self.split(prompt, salt)
        return " ".join(words[: max(prefix, 1)])  # a prefix under one block caches nothing: harmless

    def measured_text(self, prompt: Prompt, salt: str, fresh: str) -> str:
        words, prefix = self.split(prompt, salt)
        rest = len(words) - prefix
        suffix = fresh.split()[: min(SALT_WORDS, rest)]
        return " ".join(words[:prefix] + suffix + words[prefix + len(suffix) :])

    def expected_ratio(self, prompts: list[Prompt], recs: list[RequestRecord], salt: str) -> float | None:
        """Whole-block expected hits over the phase's requests, weighted by their lengths."""
        cached = total = 0
        by_id = {p.prompt_id: p for p in prompts}
        for r in recs:
            words, prefix = self.split(by_id[r.prompt_id], salt)
            cached += self.expected_cached(len(words), prefix)
            total += len(words)
        return cached / total if total else None


def dial_for(run: Any) -> Dial | None:
    """The scenario's dial with the server's block size (the embedded mock's profile; else 1)."""
    scn: Scenario = run.scn
    reuse = scn.prompts.reuse
    if reuse.hit_rate is None:
        return None
    block, source = 1, "unknown (no whole-block rounding)"
    if run.target.mock is not None:
        from kvbench.mock.profiles import load_profile

        overrides = {**scn.test.mock_defaults, **scn.target.mock_overrides}
        block = int(load_profile(scn.target.mock_profile, overrides).block_tokens)
        source = f"mock profile {scn.target.mock_profile}"
    return Dial(reuse.hit_rate, reuse.tolerance, block, source)


def fresh_suffix_salt(run: Any) -> str:
    # drawn from the run's salt stream even with prompts.salt: none: the suffix must never hit
    return make_salt(run.salt_rng)


def ratio(cached: float | None, total: float | None) -> float | None:
    return round(cached / total, 4) if cached is not None and total else None


def check_phase(
    run: Any, dial: Dial, phase: str, rep: int, prompts: list[Prompt], salt: str
) -> dict[str, Any]:
    """The phase's measured hit ratios against the expected one; warns and flags when off."""
    recs = [r for r in run.records if r.phase == phase and r.repetition == rep and r.ok]
    counted = [r for r in recs if r.cached_tokens is not None]
    expected = dial.expected_ratio(prompts, recs, salt)
    usage = ratio(
        sum(r.cached_tokens or 0 for r in counted),
        sum(r.prompt_tokens_server or r.prompt_tokens for r in counted),
    )
    deltas = run.metric_deltas.get(phase)
    metrics = ratio(run.adapter.hits(deltas), run.adapter.queries(deltas)) if deltas else None
    off = 0
    by_id = {p.prompt_id: p for p in prompts}
    for r in counted:
        words, prefix = dial.split(by_id[r.prompt_id], salt)
        n = r.prompt_tokens_server or r.prompt_tokens
        if (
            n
            and abs((r.cached_tokens or 0) / n - dial.expected_cached(len(words), prefix) / len(words))
            > dial.tolerance
        ):
            off += 1
    measured = [m for m in (usage, metrics) if m is not None]
    # null: nothing to hold it to (no usage.cached_tokens, no hit counters): cannot say, not "off"
    flagged = (
        None
        if expected is None or not measured
        else any(abs(m - expected) > dial.tolerance for m in measured)
    )
    out = {
        "requested": dial.hit_rate,
        "expected": None if expected is None else round(expected, 4),
        "tolerance": dial.tolerance,
        "block_tokens": dial.block_tokens,
        "block_source": dial.block_source,
        "measured_usage": usage,
        "measured_metrics": metrics,
        "requests": len(recs),
        "requests_off": off,
        "hit_rate_off": flagged,
    }
    line = (
        f"{phase}: hit rate requested {dial.hit_rate:g}, expected {out['expected']} "
        f"({dial.block_tokens}-token blocks), measured {usage} (usage) / {metrics} (/metrics)"
    )
    if flagged is None:
        line += ": nothing measured it (no cached_tokens in usage, no hit counters)"
    run.progress.log(f"warning: {line}: off by more than {dial.tolerance:g}" if flagged else line)
    return out
