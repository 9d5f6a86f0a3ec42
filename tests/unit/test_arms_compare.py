"""`kvbench compare`'s arm-aware pieces: length bins instead of one row a length, labels by arm."""

from __future__ import annotations

from pathlib import Path

from kvbench.report.compare import _bin, _length_pairs, _shown, arm_of


def test_lengths_collapse_into_power_of_two_bins() -> None:
    mine = {("cached", t): float(t) for t in range(1000, 1200)}  # 200 distinct lengths, as a trace has
    base = {("cached", t): 2.0 * t for t in range(1000, 1200)}
    pairs = _length_pairs(mine, base, binned=True)
    assert [k for k, _, _ in pairs] == [("cached", "512-1,023 tokens"), ("cached", "1,024-2,047 tokens")]
    (_, v, bv) = pairs[1]
    assert bv == 2 * v  # medians of the same lengths on both sides
    assert _bin(1) == "1-1 tokens" and _bin(4096) == "4,096-8,191 tokens"
    few = _length_pairs({("cold", 100): 1.0}, {("cold", 100): 2.0, ("cold", 200): 3.0}, binned=False)
    assert few == [(("cold", "100 tokens"), 1.0, 2.0)]


def test_labels_follow_the_arm(tmp_path: Path) -> None:
    run = tmp_path / "arms-x" / "1-no-offload" / "20261206T000000Z-replay-abc"
    run.mkdir(parents=True)
    assert arm_of(run) == "no-offload"
    assert arm_of(tmp_path / "results" / "20261206T000000Z-replay-abc") is None
    assert _shown("cached", "no-offload") == "no-offload" and _shown("probe", "no-offload") == "probe"
    assert _shown("cached", None) == "cached"
