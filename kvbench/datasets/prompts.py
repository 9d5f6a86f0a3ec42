"""A dataset as the run's prompt list: TEXT requests sent as written after the run's salt, LENGTHS
requests realised token-exact from their hash ids, as a replay realises a trace row.

Cold start is the throughput test's own: every prompt is `salt + " " + body` with a fresh salt per
run (or per request). A realised prompt leaves its first SALT_WORDS words out of the body, so with
the salt in front it is still exactly input_tokens long and its blocks fall where the ids say.
The expected reuse (dataset.jsonl) follows the order a phase sends the prompts in, repeats included.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.datasets import Dataset
from kvbench.datasets.record import DatasetRow
from kvbench.load.prompts import SALT_WORDS, VOCAB, Prompt, TokenCounter
from kvbench.traces.lru import expected_reusable_blocks
from kvbench.traces.realise import BlockText, EngineReuse, calibrate, prompt_text

PLACEHOLDER_SALT = " ".join(["the"] * SALT_WORDS)  # counts as a salt of the run does: one token a word


@dataclass(slots=True)
class DatasetPrompt(Prompt):
    output_tokens: int | None = None  # the dataset's answer length for this prompt; None: output.max_tokens


async def dataset_prompts(
    ds: Dataset, *, counter: TokenCounter | None, salted: bool, seed: int
) -> list[DatasetPrompt]:
    """The prompts in dataset order (prompt_id = position in the dataset)."""
    prompts: list[DatasetPrompt | None] = [None] * len(ds.requests)
    await _lengths(ds, prompts, counter, salted, seed)
    await _texts(ds, prompts, counter, salted)
    return [p for p in prompts if p is not None]


async def _lengths(
    ds: Dataset, prompts: list[DatasetPrompt | None], counter: TokenCounter | None, salted: bool, seed: int
) -> None:
    where = [i for i, r in enumerate(ds.requests) if r.kind == "lengths"]
    if not where:
        return
    cal = await calibrate(VOCAB, counter)
    blocks = BlockText(cal.words, ds.block_tokens, seed, "")
    for i in where:
        req = ds.requests[i]
        text, _tokens = prompt_text(req.trace_row(), blocks, cal.special_tokens)
        words = text.split(" ")
        keep = max(1, len(words) - SALT_WORDS) if salted else len(words)
        tokens = cal.special_tokens + (SALT_WORDS if salted else 0) + keep  # input_tokens unless too short
        body = " ".join(words[len(words) - keep :])
        prompts[i] = DatasetPrompt(i, req.input_tokens or 0, body, tokens, cal.source, req.output_tokens)


async def _texts(
    ds: Dataset, prompts: list[DatasetPrompt | None], counter: TokenCounter | None, salted: bool
) -> None:
    where = [i for i, r in enumerate(ds.requests) if r.kind == "text"]
    if not where:
        return
    texts = [ds.requests[i].text or "" for i in where]
    sent = [f"{PLACEHOLDER_SALT} {t}" if salted else t for t in texts]
    replies = [r for i in where if (r := ds.requests[i].reply) is not None]
    if counter is not None:
        counts, reply_counts = await counter(sent), await counter(replies)
    else:
        counts, reply_counts = [len(t.split()) for t in sent], [len(r.split()) for r in replies]
    source = "server" if counter is not None else "estimate"
    answers = iter(reply_counts)
    for k, i in enumerate(where):
        req = ds.requests[i]
        out = req.output_tokens if req.reply is None else max(1, next(answers))
        prompts[i] = DatasetPrompt(i, counts[k], texts[k], counts[k], source, out)


def request_rows(
    ds: Dataset, prompts: list[DatasetPrompt], order: list[int], engine_block: int | None
) -> list[DatasetRow]:
    """One row per request of a phase, in the order it sends them: what an unbounded prefix cache
    holds of each LENGTHS prompt after the requests before it (the replay's rule, kvbench.traces)."""
    eblock = engine_block if engine_block and ds.block_tokens % engine_block == 0 else None
    lengths = [k for k, pid in enumerate(order) if ds.requests[pid].kind == "lengths"]
    rows = [ds.requests[order[k]].trace_row() for k in lengths]
    ideal = dict(zip(lengths, expected_reusable_blocks(rows), strict=True))
    engine = EngineReuse(ds.block_tokens, eblock) if eblock else None
    engine_tokens = {k: engine.access(row) for k, row in zip(lengths, rows, strict=True)} if engine else {}
    out = []
    for k, pid in enumerate(order):
        req, p = ds.requests[pid], prompts[pid]
        hit = ideal.get(k)
        out.append(
            DatasetRow(
                index=k,
                prompt_id=pid,
                format=ds.format.name,
                line=req.line,
                kind=req.kind,
                session=req.session,
                turn=req.turn,
                input_tokens=req.input_tokens,
                prompt_tokens=p.actual_tokens,
                count_source=p.count_source,
                output_tokens=p.output_tokens,
                blocks=len(req.hash_ids),
                block_tokens=ds.block_tokens,
                expected_blocks=hit,
                expected_cached_tokens=None
                if hit is None
                else min(hit * ds.block_tokens, req.input_tokens or 0),
                engine_expected_tokens=engine_tokens.get(k),
            )
        )
    return out
