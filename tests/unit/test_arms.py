"""Offload arms: parsing, ABBA order, each engine's offload-off answer, the mock keeping G1."""

from __future__ import annotations

import pytest

from kvbench.engines.adapters import get_adapter
from kvbench.errors import UsageError
from kvbench.mock.profiles import load_profile
from kvbench.run.arms import abba_order, build_arm, parse_arms, phase_label


def test_parse_arms_refuses_unknown_and_single() -> None:
    assert parse_arms("offload, no-offload,no-reuse") == ["offload", "no-offload", "no-reuse"]
    with pytest.raises(UsageError, match="unknown arm 'cached'"):
        parse_arms("offload,cached")
    with pytest.raises(UsageError, match="at least two"):
        parse_arms("offload")
    with pytest.raises(UsageError, match="twice"):
        parse_arms("offload,offload")


def test_abba_order() -> None:
    assert abba_order(["offload", "no-offload"], 2) == ["offload", "no-offload", "no-offload", "offload"]
    assert abba_order(["offload", "no-offload"], 1) == ["offload", "no-offload"]


def test_mock_no_offload_keeps_g1_on_g4_only_profile() -> None:
    arm = build_arm("no-offload", get_adapter("mock"), embedded_mock=True, mock_overrides={"time_scale": 0.1})
    over = arm.overrides["target.mock_overrides"]
    assert over["time_scale"] == 0.1
    profile = load_profile("ibm-g4", over)  # shipped with G1 off: offload off must turn it ON
    assert profile.tiers.G1.enabled
    assert not any(profile.tiers.by_name(t).enabled for t in ("G2", "G3", "G4"))
    assert phase_label(arm) == "no-offload"


@pytest.mark.parametrize("engine", ["vllm", "lmcache", "llamacpp", "sglang", "dynamo"])
def test_real_server_needs_baseline_url(engine: str) -> None:
    adapter = get_adapter(engine)
    with pytest.raises(UsageError, match="--baseline-url") as exc:
        build_arm("no-offload", adapter, embedded_mock=False, mock_overrides={})
    assert "\n" not in str(exc.value) and adapter.offload_off_how in str(exc.value)
    arm = build_arm("no-offload", adapter, embedded_mock=False, mock_overrides={}, baseline_url="http://h:1")
    assert arm.overrides == {"target.base_url": "http://h:1"}


def test_no_reuse_cannot_hit() -> None:
    arm = build_arm("no-reuse", get_adapter("mock"), embedded_mock=True, mock_overrides={})
    assert not arm.can_hit and arm.overrides == {"prompts.salt": "per_request"}
