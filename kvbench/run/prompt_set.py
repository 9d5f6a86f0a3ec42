"""The run's prompt set: lengths from the scenario, counted by the server's tokenizer where it has
one, written to prompts.jsonl and described in the manifest."""

from __future__ import annotations

import time

import numpy as np

from kvbench.engines.token_count import server_token_counter
from kvbench.load.prompts import Prompt, bounded_counter, build_prompts, make_salt, resolve_lengths
from kvbench.results import PROMPTS
from kvbench.results.schema import PromptsInfo
from kvbench.run.context import Run


async def make_prompt_set(run: Run) -> list[Prompt]:
    scn = run.scn
    spec = scn.prompts.lengths
    count = scn.prompts.resolved_count()
    lengths = resolve_lengths(spec, count, scn.prompts.seed)
    counter = await server_token_counter(run.http, run.target.model, run.target.engine, scn.target.api)
    run.token_counter = bounded_counter(counter) if counter else None
    t0 = time.perf_counter()
    prompts = await build_prompts(
        lengths,
        seed=scn.prompts.seed,
        shared_prefix_tokens=scn.prompts.shared_prefix_tokens,
        counter=run.token_counter,
        sample_salt=make_salt(np.random.default_rng(0)) if scn.prompts.salt != "none" else "",
        tolerance=scn.prompts.tolerance_tokens,
    )
    elapsed = time.perf_counter() - t0
    with run.rd.writer(PROMPTS) as w:
        for p in prompts:
            w.write(p.row(""))
    off = [
        p
        for p in prompts
        if p.actual_tokens is not None
        and abs(p.actual_tokens - p.requested_tokens) > scn.prompts.tolerance_tokens
    ]
    run.rd.update(
        prompts=PromptsInfo(
            count=len(prompts),
            build_s=round(elapsed, 3),
            count_source=prompts[0].count_source if prompts else None,
            counted_as="chat message with template"
            if getattr(counter, "counts_chat", False)
            else "raw text (a chat template adds its tokens on top)"
            if scn.target.api == "chat"
            else "raw text",
            outside_tolerance=len(off),
        )
    )
    run.progress.log(
        f"built {len(prompts)} prompts ({sum(lengths):,} tokens) in {elapsed:.1f}s, "
        f"lengths counted by {'the server' if counter else 'estimate (no /tokenize)'}"
    )
    return prompts
