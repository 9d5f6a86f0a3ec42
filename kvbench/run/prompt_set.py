"""The run's prompt set: lengths from the scenario (or the requests of a dataset file), counted by
the server's tokenizer where it has one, written to prompts.jsonl and described in the manifest."""

from __future__ import annotations

import time

import numpy as np

from kvbench.engines.token_count import server_token_counter
from kvbench.load.prompts import Prompt, bounded_counter, build_prompts, make_salt, resolve_lengths
from kvbench.results import PROMPTS
from kvbench.results.schema import PROBE_ONLY_TESTS, PromptsInfo
from kvbench.run.context import Run


async def make_prompt_set(run: Run) -> list[Prompt]:
    scn = run.scn
    if scn.prompts.dataset is not None:
        return await dataset_prompt_set(run)
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
    probe = scn.test.kind in PROBE_ONLY_TESTS  # their own prompts are built as they run
    run.rd.update(
        prompts=PromptsInfo(
            role="probe" if probe else "load",
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
    counted = f"lengths counted by {'the server' if counter else 'estimate (no /tokenize)'}"
    if probe:
        run.progress.log(
            f"built {probe_words(lengths)} to check the server before the {scn.test.kind} test "
            f"in {elapsed:.1f}s, {counted}"
        )
    else:
        built = f"built {len(prompts)} prompts ({sum(lengths):,} tokens)"
        run.progress.log(f"{built} in {elapsed:.1f}s, {counted}")
    return prompts


def probe_words(lengths: list[int]) -> str:
    """`a 16-token probe`, or `3 probes (48 tokens)` where a scenario set more."""
    if len(lengths) == 1:
        return f"a {lengths[0]:,}-token probe"
    return f"{len(lengths)} probes ({sum(lengths):,} tokens)"


async def dataset_prompt_set(run: Run) -> list[Prompt]:
    """The dataset's requests as the prompt list (kvbench.datasets.prompts), dataset.jsonl beside
    prompts.jsonl with each prompt's source line and expected reuse."""
    from kvbench.datasets import open_dataset
    from kvbench.datasets.prompts import dataset_prompts, request_rows
    from kvbench.datasets.record import DATASET_ROWS
    from kvbench.load.schedule import request_order

    scn = run.scn
    assert scn.prompts.dataset is not None
    t0 = time.perf_counter()
    ds = open_dataset(scn.prompts.dataset, scn.prompts.dataset_format, scn.prompts.count)
    counter = await server_token_counter(run.http, run.target.model, run.target.engine, scn.target.api)
    run.token_counter = bounded_counter(counter) if counter else None
    prompts = await dataset_prompts(
        ds, counter=run.token_counter, salted=scn.prompts.salt != "none", seed=scn.prompts.seed
    )
    rows = request_rows(ds, prompts, request_order(scn.load, len(prompts)), _mock_block(run))
    elapsed = time.perf_counter() - t0
    with run.rd.writer(PROMPTS) as w:
        for p in prompts:
            w.write(p.row(""))
    with run.rd.writer(DATASET_ROWS) as w:
        for row in rows:
            w.write(row.model_dump(mode="json"))
    run.rd.update(
        prompts=PromptsInfo(
            role="probe" if scn.test.kind in PROBE_ONLY_TESTS else "load",
            count=len(prompts),
            build_s=round(elapsed, 3),
            count_source=prompts[0].count_source,
            counted_as="raw text, after the run's salt",
            outside_tolerance=0,
        )
    )
    skipped = f", {ds.skipped} entries skipped by the format's rule" if ds.skipped else ""
    run.progress.log(
        f"dataset {ds.path.name} ({ds.format.source}): {len(prompts)} {ds.kind} prompts "
        f"({sum(p.requested_tokens for p in prompts):,} tokens){skipped} in {elapsed:.1f}s"
    )
    return list(prompts)


def _mock_block(run: Run) -> int | None:
    """The embedded mock's prefix-cache block, for the expected reuse in its blocks (else unknown)."""
    if run.target.mock is None:
        return None
    from kvbench.mock.profiles import load_profile

    overrides = {**run.scn.test.mock_defaults, **run.scn.target.mock_overrides}
    return getattr(load_profile(run.scn.target.mock_profile, overrides), "block_tokens", None)
