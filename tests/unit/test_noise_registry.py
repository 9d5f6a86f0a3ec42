"""The noise backend registry: every scenario kind has a backend, unknown kinds are one-line
errors, a new kind is one registration; the sender process keeps its stdlib-only start."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import kvbench.noise as noise
from kvbench.errors import UsageError
from kvbench.noise import (
    NoiseBackend,
    NoiseContext,
    NoiseHandle,
    noise_backend_factory,
    noise_generator,
    noise_kinds,
    register_noise_kind,
)
from kvbench.scenario import Noise

ROOT = Path(__file__).resolve().parents[2]


def scenario_kinds() -> set[str]:
    """The kinds the scenario's noise union accepts (its `kind` literals)."""
    union = typing.get_args(Noise)[0]
    return {typing.get_args(m.model_fields["kind"].annotation)[0] for m in typing.get_args(union)}


def test_every_scenario_kind_is_registered() -> None:
    assert set(noise_kinds()) == scenario_kinds() == {"none", "tcp", "iperf3", "fio"}
    for kind in noise_kinds():
        factory = noise_backend_factory(kind)
        assert isinstance(factory, type) and issubclass(factory, NoiseBackend), kind


def test_unknown_kind_is_a_one_line_usage_error() -> None:
    class Remote:
        kind = "remote"

    with pytest.raises(UsageError) as exc:
        noise_generator(Remote(), phase="p", writer=None, origin_ns=0)
    assert exc.value.message == "noise.kind: unknown noise kind 'remote' (known: none, tcp, iperf3, fio)"
    assert "\n" not in exc.value.message


def test_kinds_are_per_cluster() -> None:
    """A remote cluster registers its own factories (ray: the same kinds); none elsewhere."""
    assert noise_kinds("ray") == ("none", "tcp", "iperf3", "fio")
    assert noise_kinds("elsewhere") == ()
    with pytest.raises(UsageError) as exc:
        noise_backend_factory("tcp", "elsewhere")
    assert (
        exc.value.message
        == "noise.kind: unknown noise kind 'tcp' on cluster 'elsewhere' (known: none registered)"
    )


def test_registering_a_taken_kind_needs_replace() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_noise_kind("tcp", "kvbench.noise.tcp:TcpNoiseBackend")


class _Counting(NoiseBackend):
    """A backend of a made-up kind: what a remote backend must provide, and nothing more."""

    def __init__(self, cfg: Any, ctx: NoiseContext) -> None:
        self.handle = ctx.handle("counting", cfg, target_bytes_per_s=100.0)
        self.stopped = False

    async def start(self) -> NoiseHandle:
        self.handle.started_ns = self.handle.now_ns()
        self.handle.active = True
        return self.handle

    def sample_bytes(self) -> int | None:
        return 42

    async def stop(self) -> None:
        self.handle.stopped_ns = self.handle.started_ns  # a fixed 1 s phase, for the summary below
        self.handle.duration_s = 1.0
        self.handle.total_bytes = 100
        self.handle.active = False
        self.stopped = True


class _CountingConfig:
    kind = "counting"

    def model_dump(self) -> dict[str, Any]:
        return {"kind": "counting"}


@pytest.fixture
def counting_kind():
    register_noise_kind("counting", _Counting)
    yield
    noise._REGISTRY.pop(("local", "counting"))


async def test_a_new_kind_is_one_registration(counting_kind: None) -> None:
    assert noise_kinds()[-1] == "counting"
    backend = noise_generator(_CountingConfig(), phase="noisy-1", writer=None, origin_ns=0)
    async with backend as handle:
        assert handle.active and handle.phase == "noisy-1"
        assert handle.summary()["total_bytes"] == 42  # while running: sample_bytes()
    assert isinstance(backend, _Counting) and backend.stopped
    s = handle.summary()
    assert s["kind"] == "counting" and s["total_bytes"] == 100 and s["reached_target"] is True


def test_none_backend_is_inactive() -> None:
    backend = noise_generator(
        type("C", (_CountingConfig,), {"kind": "none"})(), phase="p", writer=None, origin_ns=0
    )
    assert backend.handle.kind == "none" and backend.sample_bytes() == 0


def test_package_import_and_sender_stay_lean() -> None:
    """The sender starts on the stdlib alone: no asyncio, typing, pydantic or other kvbench module."""
    code = "import sys, kvbench.noise; print(sorted(m for m in sys.modules if m in {'typing', 'asyncio'}))"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
    res = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-m", "kvbench.noise.sender", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert res.returncode == 0 and "HOST" in res.stdout.upper()
    modules = {
        line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")
    }
    assert {"kvbench", "kvbench.noise"} <= modules
    heavy = {"asyncio", "typing", "pydantic", "dataclasses", "json", "ssl"}
    assert not modules & heavy, modules & heavy
    assert {m for m in modules if m.startswith("kvbench")} == {"kvbench", "kvbench.noise"}
