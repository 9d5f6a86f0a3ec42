"""The TTFT test: for each length, a verified-cold request, an optional eviction, then warm ones."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbench.client import RequestRecord
from kvbench.engines.adapters import EngineAdapter
from kvbench.errors import KvbenchError
from kvbench.load.prompts import Prompt, build_prompts, make_salt
from kvbench.results.schema import Label, TtftStep
from kvbench.run.context import Run, phase_entry
from kvbench.scenario import Scenario, TtftSection


def section(scn: Scenario) -> TtftSection:
    assert isinstance(scn.test, TtftSection), scn.test.kind
    return scn.test


async def run_ttft(run: Run, prompts: list[Prompt]) -> None:
    scn = run.scn
    test = section(scn)
    rows: list[dict[str, Any]] = []
    for rep in range(scn.repetitions):
        phase = "ttft"
        run.progress.start_phase(
            f"ttft rep {rep + 1}/{scn.repetitions}", len(prompts) * (1 + test.warm_repeats)
        )
        before = await run.phase_boundary(phase)
        started = run.client.now()
        for prompt in prompts:
            salt = run.new_salt()
            text = prompt.with_salt(salt)
            reset_ok = await run.reset()
            cold = await run.issue(phase=phase, label=Label.COLD, rep=rep, prompt=prompt, text=text)
            verified = cold.cached_tokens == 0 if cold.cached_tokens is not None else None
            evicted = await evict(run, rep, prompt)
            warm_label = Label.EVICTED_WARM if evicted is not None else Label.WARM
            warms = []
            for _ in range(test.warm_repeats):
                warms.append(
                    await run.issue(phase=phase, label=warm_label, rep=rep, prompt=prompt, text=text)
                )
            rows.append({**_ttft_row(prompt, cold, warms, verified, reset_ok), **(evicted or {})})
        run.progress.end_phase()
        after = await run.scraper.scrape(phase)
        run.end_metrics(phase if scn.repetitions == 1 else f"{phase}-{rep + 1}", before, after)
        steps = [TtftStep.model_validate(r) for r in rows if r["rep"] == rep]
        run.add_ttft_steps(steps)
        run.add_phase(
            phase_entry(
                run,
                phase,
                Label.TTFT,
                rep,
                started,
                cold_verified=all(r["verified"] is True for r in rows if r["rep"] == rep) if rows else None,
            )
        )
    run.summary_lines = ttft_table(rows)


async def evict(run: Run, rep: int, current: Prompt) -> dict[str, Any] | None:
    """Between cold and warm, push the prompt's KV out of the fast tiers; None when not asked to."""
    test = section(run.scn)
    mode = test.eviction
    if mode == "none":
        return None
    if mode == "tier_reset":
        from kvbench.engines.adapters import TierOperationFailed, TierUnsupported

        try:
            await run.adapter.evict_fast_tiers(run.http)
        except (TierUnsupported, TierOperationFailed) as exc:
            raise KvbenchError(f"cache.eviction=tier_reset: {exc.message}") from None
        return {"eviction": mode}
    if mode == "slot_file":
        return await slot_file_round_trip(run, current)
    total = test.filler_tokens or 2 * current.requested_tokens
    n = max(1, -(-total // max(current.requested_tokens, 1)))
    fillers = await build_prompts(
        [current.requested_tokens] * n,
        seed=run.scn.prompts.seed + 7919 + rep,
        counter=run.token_counter,
        sample_salt=make_salt(np.random.default_rng(1)),
    )
    for f in fillers:
        filler = Prompt(-2, f.requested_tokens, f.body, f.actual_tokens)
        await run.issue(
            phase="ttft", label=Label.FILLER, rep=rep, prompt=filler, text=filler.with_salt(run.new_salt())
        )
    return {"eviction": mode, "filler_requests": n}


async def slot_file_round_trip(run: Run, current: Prompt) -> dict[str, Any]:
    """llama.cpp's disk tier: save slot 0's KV to a file, erase the slot, restore it from the file.

    The restore is its own HTTP call, so it is NOT inside the evicted-warm TTFT that follows:
    it is recorded beside it (restore_ms from the server, restore_client_ms end to end), and the
    TTFT table's disk figure is warm TTFT + restore.
    """
    from kvbench.engines.adapters import TierOperationFailed, TierUnsupported

    filename = f"kvbench-{run.rd.run_id}-{current.prompt_id}.bin"
    try:
        trip = await run.adapter.disk_round_trip(run.http, 0, filename)
    except TierUnsupported:
        raise KvbenchError(
            f"cache.eviction=slot_file: needs llama.cpp's slot save/restore (engine is {run.target.engine})"
        ) from None
    except TierOperationFailed as exc:
        raise KvbenchError(
            f"cache.eviction=slot_file: {exc} (start llama-server with --slot-save-path)"
        ) from None
    return {"eviction": "slot_file", "slot_file": filename, **trip}


def _ttft_row(
    prompt: Prompt,
    cold: RequestRecord,
    warms: list[RequestRecord],
    verified: bool | None,
    reset_ok: bool | None,
) -> dict[str, Any]:
    def ttft(r: RequestRecord) -> float | None:
        return None if r.first_token_ns is None or r.sent_ns is None else (r.first_token_ns - r.sent_ns) / 1e9

    warm_ttfts = [t for t in (ttft(w) for w in warms) if t is not None]
    warm = min(warm_ttfts) if warm_ttfts else None
    cold_t = ttft(cold)
    match = None
    if warms and cold.ok and all(w.ok for w in warms):
        match = all(w.output_text == cold.output_text for w in warms)
    return {
        "rep": cold.repetition,
        "prompt_id": prompt.prompt_id,
        "tokens": prompt.requested_tokens,
        "cold_ttft_s": cold_t,
        "warm_ttft_s": warm,
        "speedup": (cold_t / warm) if cold_t and warm else None,
        "cold_cached_tokens": cold.cached_tokens,
        "warm_cached_tokens": warms[-1].cached_tokens if warms else None,
        "verified": verified,
        "reset": reset_ok,
        "outputs_match": match,
    }


def ttft_table(rows: list[dict[str, Any]]) -> list[str]:
    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    disk = any(r.get("restore_client_ms") is not None for r in rows)
    head = (
        f"{'tokens':>8} {'cold TTFT s':>12} {'warm TTFT s':>12} {'speedup':>8} {'cached':>8} "
        f"{'cold verified':>14} {'same output':>11}"
    )
    lines = [head + (f" {'warm+restore s':>15}" if disk else "")]
    for r in rows:
        verified = {True: "yes", False: "NO", None: "unknown"}[r["verified"]]
        match = {True: "yes", False: "NO", None: "-"}[r["outputs_match"]]
        line = (
            f"{r['tokens']:>8} {f(r['cold_ttft_s'], '.3f'):>12} {f(r['warm_ttft_s'], '.3f'):>12} "
            f"{f(r['speedup'], '.1f'):>7}x {_dash(r['warm_cached_tokens']):>8} "
            f"{verified:>14} {match:>11}"
        )
        if disk:
            # the restore is a separate call, outside the measured TTFT: the disk tier's cost is both
            restore = r.get("restore_client_ms")
            total = None if r["warm_ttft_s"] is None or restore is None else r["warm_ttft_s"] + restore / 1000
            line += f" {f(total, '.3f'):>15}"
        lines.append(line)
    return lines


def pin_slot(scn: Scenario, adapter: EngineAdapter) -> dict[str, Any]:
    # slot_file saves and restores slot 0: every request must land in it
    slot_file = isinstance(scn.test, TtftSection) and scn.test.eviction == "slot_file"
    return adapter.pin_request(0) if slot_file else {}


def _dash(x: Any) -> str:
    return "-" if x is None else str(x)
