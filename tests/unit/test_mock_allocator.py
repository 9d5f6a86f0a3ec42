"""kvbench.mock.allocator: glibc told to keep large buffers in the mock's process, or nothing done."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

PROBE = "from kvbench.mock.allocator import keep_large_buffers; print(keep_large_buffers())"


def _run(env: dict[str, str]) -> str:
    # in a child: mallopt changes the whole process, not a test's to make in pytest's
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not ctypes.util.find_library("c"), reason="glibc only"
)
def test_the_thresholds_are_raised_on_glibc() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KVBENCH_MOCK_MALLOPT"}
    assert _run(env) == "True"


def test_the_switch_leaves_the_allocator_alone() -> None:
    assert _run({**os.environ, "KVBENCH_MOCK_MALLOPT": "0"}) == "False"
