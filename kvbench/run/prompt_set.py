"""The run's prompt set: lengths from the scenario (or the requests of a dataset file), counted by
the server's tokenizer where it has one, written to prompts.jsonl and described in the manifest."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from kvbench.engines.token_count import server_token_counter
from kvbench.load.prompts import Prompt, bounded_counter, build_prompts, make_salt, resolve_lengths
from kvbench.results import PROMPTS
from kvbench.results.schema import PROBE_ONLY_TESTS, ContextFitRecord, LengthRangeInfo, LoadShape, PromptsInfo
from kvbench.run.context import Run
from kvbench.run.replay.feed import ContextFit, context_line

if TYPE_CHECKING:
    from kvbench.datasets import Dataset
    from kvbench.datasets.prompts import DatasetPrompt


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
    fit = ContextFit(
        run.target.max_model_len,
        scn.prompts.over_context,
        ds.block_tokens,
        str(ds.path),
        option="prompts.over_context",
        narrow="prompts.count takes fewer requests",
    )
    ds = fit_lengths(ds, fit, scn.output.max_tokens)
    counter = await server_token_counter(run.http, run.target.model, run.target.engine, scn.target.api)
    run.token_counter = bounded_counter(counter) if counter else None
    built = await dataset_prompts(
        ds, counter=run.token_counter, salted=scn.prompts.salt != "none", seed=scn.prompts.seed
    )
    ds, prompts = fit_texts(ds, built, fit, scn.output.max_tokens)
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
            context=ContextFitRecord.model_validate(fit.record()),
        ),
        load=dataset_load(run, prompts),
    )
    if (fitted := context_line(fit.record(), "dataset", "prompts.over_context")) is not None:
        run.progress.log(fitted)
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


def fit_lengths(ds: Dataset, fit: ContextFit, max_tokens: int) -> Dataset:
    """The dataset with its LENGTHS requests fitted to the context before they are built: one over it
    refused, left out or clipped (its ids cut to the blocks it still covers), as a replay's rows."""
    keep = []
    changed = False
    for req in ds.requests:
        if req.kind != "lengths":
            keep.append(req)
            continue
        row = req.trace_row()
        out = req.output_tokens if req.output_tokens is not None else max_tokens
        tokens = fit.keep(req.line, row.input_length, out)
        changed |= tokens != row.input_length
        if tokens is None:
            continue
        if tokens != row.input_length:
            block = req.block_tokens or ds.block_tokens
            req = replace(req, input_tokens=tokens, hash_ids=req.hash_ids[: -(-tokens // block)])
        keep.append(req)
    return replace(ds, requests=keep) if changed else ds


def fit_texts(
    ds: Dataset, prompts: list[DatasetPrompt], fit: ContextFit, max_tokens: int
) -> tuple[Dataset, list[DatasetPrompt]]:
    """TEXT requests once counted: one over the context refused or left out (sent as written, it
    cannot be clipped token-exact); the rest renumbered so prompt_id stays the position."""
    keep: list[int] = []
    for i, (req, p) in enumerate(zip(ds.requests, prompts, strict=True)):
        out = p.output_tokens if p.output_tokens is not None else max_tokens
        if (
            req.kind == "text"
            and fit.keep(req.line, p.actual_tokens or p.requested_tokens, out, False) is None
        ):
            continue
        keep.append(i)
    if len(keep) == len(prompts):
        return ds, prompts
    kept = [replace(prompts[i], prompt_id=k) for k, i in enumerate(keep)]
    return replace(ds, requests=[ds.requests[i] for i in keep]), kept


def dataset_load(run: Run, prompts: list[DatasetPrompt]) -> LoadShape | None:
    """The manifest's load with the dataset's prompts as sent (their count and lengths), not the
    scenario's `prompts.lengths`, which a dataset replaces."""
    load = run.rd.manifest.load if run.rd.manifest is not None else None
    if load is None or not prompts:
        return load
    sizes = [p.actual_tokens or p.requested_tokens for p in prompts]
    return load.model_copy(
        update={
            "prompt_count": len(prompts),
            "requests": run.scn.load.requests_per_phase(len(prompts)),
            "lengths": LengthRangeInfo(min=min(sizes), max=max(sizes), distribution="dataset"),
        }
    )
