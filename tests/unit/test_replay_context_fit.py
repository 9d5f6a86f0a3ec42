"""ContextFit under trace.over_context: rows that fit pass, longer ones are refused, skipped or
clipped, and a row whose answer alone fills the context is skipped (with its reason), never sent
as a request no server could take."""

from __future__ import annotations

import pytest

from kvbench.errors import UsageError
from kvbench.run.replay.feed import ContextFit, context_line
from kvbench.traces.rows import TraceRow

CONTEXT = 4096
BLOCK = 512


def _row(line: int, prompt: int, answer: int) -> TraceRow:
    return TraceRow(line, float(line), prompt, answer, tuple(range(-(-prompt // BLOCK))))


ROWS = [
    _row(1, 1000, 100),  # fits
    _row(2, CONTEXT, 100),  # over: clipped to CONTEXT - 100
    _row(3, 200, CONTEXT),  # the answer alone is the whole context
    _row(4, 10, CONTEXT + 50),  # the answer alone is over it
    _row(5, CONTEXT - 1, 1),  # exactly full: fits
]


def _fit(policy: str) -> ContextFit:
    return ContextFit(CONTEXT, policy, BLOCK, "t.jsonl")


def _answer(row: TraceRow) -> int:
    return row.output_length


def test_clip_skips_a_row_whose_answer_fills_the_context() -> None:
    fit = _fit("clip")
    out = list(fit.rows(ROWS, _answer))
    assert [r.line for r in out] == [1, 2, 5]
    assert all(r.input_length + r.output_length <= CONTEXT and r.input_length >= 1 for r in out)
    clipped = out[1]
    assert clipped.input_length == CONTEXT - 100 and len(clipped.hash_ids) == -(-(CONTEXT - 100) // BLOCK)
    rec = fit.record()
    assert rec["clipped"] == 1 and rec["skipped"] == 2
    assert rec["skipped_why"] == {"answer alone fills the context": 2}
    line = context_line(rec)
    assert line is not None and "2 row(s) skipped (2 answer alone fills the context)" in line
    assert "1 clipped" in line and "trace.over_context=clip" in line


def test_skip_counts_every_long_row_over_the_context() -> None:
    fit = _fit("skip")
    assert [r.line for r in fit.rows(ROWS, _answer)] == [1, 5]
    rec = fit.record()
    assert (rec["skipped"], rec["clipped"]) == (3, 0)
    assert rec["skipped_why"] == {"over the context": 3}


def test_fail_names_the_row_and_the_option() -> None:
    refused = r"t\.jsonl:2: input_length: 4096 \+ 100 .*over_context=skip or clip"
    with pytest.raises(UsageError, match=refused):
        list(_fit("fail").rows(ROWS, _answer))


def test_rows_that_fit_are_untouched_and_nothing_is_said() -> None:
    fit = _fit("clip")
    fitting = [ROWS[0], ROWS[4]]
    assert list(fit.rows(fitting, _answer)) == fitting
    assert fit.record()["skipped_why"] == {} and context_line(fit.record()) is None
    unknown = ContextFit(None, "fail", BLOCK, "t.jsonl")  # no context known: nothing is judged
    assert list(unknown.rows(ROWS, _answer)) == ROWS
