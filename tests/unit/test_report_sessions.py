"""The sessions report: table and plots from a DataFrame of turn rows (no server)."""

from __future__ import annotations

import json

import pandas as pd

from kvbench.report.core.plots import new_figure
from kvbench.report.sessions.turns import (
    compare_turns,
    plot_hit_ratio,
    plot_tier_shares,
    plot_ttft_vs_context,
    plot_ttft_vs_turn,
    read_turns,
    save_session_plots,
    session_section_rows,
    tier_shares,
    turn_table,
)


def _frame() -> pd.DataFrame:
    rows = []
    for label in ("cached", "baseline"):
        for s in range(3):
            for t in range(4):
                ctx = 1000 + 600 * t
                cached = 0 if (label == "baseline" or t == 0) else ctx - 600
                tier = "none" if not cached else ("G3" if s == 2 else "G1")
                rows.append(
                    {
                        "phase": label,
                        "label": label,
                        "session_id": s,
                        "turn": t,
                        "ok": True,
                        "context_tokens": ctx,
                        "prompt_tokens_server": ctx,
                        "cached_tokens": cached,
                        "ttft_ms": (ctx / 10) if not cached else 5.0 + (20 if tier == "G3" else 0),
                        "tier": tier,
                        "tokens_by_tier": {tier: cached} if cached else {},
                        "sent_ns": int((t * 3 + s) * 1e8),
                    }
                )
    return pd.DataFrame(rows)


def test_turn_table_and_section_rows():
    df = _frame()
    t = turn_table(df)
    assert list(t["turn"]) == [0, 1, 2, 3]
    assert t.loc[0, "speedup"] == 1.0 and t.loc[3, "speedup"] > 10
    assert abs(t.loc[1, "hit_ratio"] - 1000 / 1600) < 1e-9
    header, rows = session_section_rows(df)
    assert header[0] == "turn" and len(rows) == 4 and rows[1][-1] == "G1"


def test_tier_shares_sum_to_one():
    sh = tier_shares(_frame(), bins=3)
    assert len(sh) == 3
    cols = [c for c in sh.columns if c != "t_s"]
    assert ((sh[cols].sum(axis=1) - 1).abs() < 1e-9).all()
    assert sh["G3"].sum() > 0 and sh["G1"].sum() > 0


def test_plots_draw_on_given_axes(tmp_path):
    df = _frame()
    for fn in (plot_ttft_vs_turn, plot_ttft_vs_context, plot_hit_ratio, plot_tier_shares):
        _fig, (ax,) = new_figure()
        fn(ax, df)
        assert ax.has_data()
    paths = save_session_plots(df, tmp_path)
    assert len(paths) == 4 and all(p.stat().st_size > 1000 for p in paths)


def test_read_turns_and_compare(tmp_path):
    (tmp_path / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _frame().to_dict("records")))
    df = read_turns(tmp_path)
    assert len(df) == 24
    both = compare_turns([("a", df), ("b", df)])
    assert set(both["run"]) == {"a", "b"} and len(both) == 8
    empty = read_turns(tmp_path / "nothing")
    assert len(empty) == 0 and save_session_plots(empty, tmp_path) == []
