"""The sessions room's summary, by-tier table and run-against-run comparison, from hand-made
turns.jsonl files whose medians and ratios are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbench.report.sessions.turns import compare_rows, compare_sessions, tier_rows, turns_summary


def _turns(run: Path, warm_ms: float, tier_of_user: dict[int, str]) -> Path:
    """Two users, three turns: turn 0 recomputed at 100 ms, later turns cached at `warm_ms`
    (half their context cached), served from the user's tier; a baseline of 200 ms per turn."""
    run.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    for user in (0, 1):
        for turn in range(3):
            ctx = 1000 * (turn + 1)
            cached = 0 if turn == 0 else ctx // 2
            rows.append({"phase": "cached", "label": "cached", "session_id": user, "turn": turn, "ok": True,
                         "context_tokens": ctx, "cached_tokens": cached,
                         "ttft_ms": 100.0 if turn == 0 else warm_ms,
                         "tier": "none" if turn == 0 else tier_of_user[user],
                         "since_prev_turn_s": None if turn == 0 else 2.0 * (user + 1)})  # fmt: skip
            rows.append({"phase": "baseline", "label": "baseline", "session_id": user, "turn": turn,
                         "ok": True, "context_tokens": ctx, "cached_tokens": 0,
                         "ttft_ms": 200.0})  # fmt: skip
    rows.append({"phase": "cached", "label": "cached", "session_id": 9, "turn": 1, "ok": False,
                 "context_tokens": 5, "cached_tokens": 0, "ttft_ms": None})  # fmt: skip
    (run / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_turns_summary_per_turn_hit_ratio_and_speedup(tmp_path: Path) -> None:
    run = _turns(tmp_path / "a", 20.0, {0: "G1", 1: "G3"})
    summary = turns_summary(run)
    assert summary is not None and summary["turns"] == 13
    by_turn = {t["turn"]: t for t in summary["per_turn"]}
    assert set(by_turn) == {0, 1, 2}
    assert by_turn[1]["ttft_cached_ms"] == 20.0
    assert by_turn[1]["hit_ratio"] == 0.5  # half of every later turn's context was cached
    assert by_turn[0]["hit_ratio"] == 0.0
    assert turns_summary(tmp_path / "nothing") is None


def test_tier_rows_group_the_later_turns_by_where_they_were_served(tmp_path: Path) -> None:
    summary = turns_summary(_turns(tmp_path / "a", 20.0, {0: "G1", 1: "G3"}))
    assert summary is not None
    header, rows = tier_rows(summary)
    assert header[0] == "served from"
    by_tier = {r[0]: r for r in rows}
    # turn 0 is never in it; each user's turns 1 and 2 went to one tier
    assert set(by_tier) == {"G1", "G3"}
    assert by_tier["G1"][1] == "2" and by_tier["G3"][1] == "2"
    assert by_tier["G1"][2] == "20.0"
    # context p50 of turns 1 and 2 (2000, 3000); pause before: 2 s for user 0, 4 s for user 1
    assert by_tier["G1"][3] == "2,500" and by_tier["G1"][4] == "2.00" and by_tier["G3"][4] == "4.00"
    assert [r[0] for r in rows] == ["G1", "G3"]  # fastest tier first
    assert tier_rows({}) == (header, [])


def test_compare_rows_put_every_run_against_the_first(tmp_path: Path) -> None:
    a = _turns(tmp_path / "a", 20.0, {0: "G1", 1: "G1"})
    b = _turns(tmp_path / "b", 50.0, {0: "G3", 1: "G3"})
    header, rows = compare_rows(["a", "b"], [a, b])
    assert header == ["run", "turn", "TTFT cached p50 ms", "vs a", "hit ratio"]
    got = {(r[0], r[1]): r for r in rows}
    assert len(rows) == 6
    assert got[("a", "1")][3] == "1.00x" and got[("b", "1")][3] == "2.50x"  # 50 ms over 20 ms
    assert got[("b", "0")][3] == "1.00x"  # both recompute turn 0 at 100 ms
    assert got[("b", "2")][4] == "50.0%"
    assert compare_rows(["x"], [tmp_path / "none"]) == ([], [])


def test_compare_sessions_writes_its_plot(tmp_path: Path) -> None:
    a = _turns(tmp_path / "a", 20.0, {0: "G1", 1: "G1"})
    b = _turns(tmp_path / "b", 30.0, {0: "G2", 1: "G2"})
    out = tmp_path / "out"
    out.mkdir()
    section, path = compare_sessions(["a", "b"], [a, b], out)
    assert section is not None
    title, _, tables = section
    assert title == "Sessions: cached TTFT per turn" and len(tables[0].rows) == 6
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    none, _ = compare_sessions(["x"], [tmp_path / "nothing"], out)
    assert none is None
