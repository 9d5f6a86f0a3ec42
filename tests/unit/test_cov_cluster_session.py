"""Connecting to Ray, against a stand-in `ray` module: which address each form reaches, what is
shipped, which session is ours to shut down, and failures as one line with the address."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from kvbench.cluster import require_ray, session
from kvbench.errors import UsageError


class FakeRay(types.ModuleType):
    def __init__(
        self, *, initialized: bool = False, refuse_auto: bool = False, fail: Exception | None = None
    ):
        super().__init__("ray")
        self.__version__ = "9.9.9"
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.shutdowns = 0
        self._initialized = initialized
        self._refuse_auto = refuse_auto
        self._fail = fail
        self.util = types.SimpleNamespace(get_node_ip_address=lambda: "10.1.2.3")

    def is_initialized(self) -> bool:
        return self._initialized

    def init(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))
        if self._fail is not None:
            raise self._fail
        if self._refuse_auto and args and args[0] == "auto":
            raise ConnectionError("no cluster here")
        self._initialized = True

    def shutdown(self) -> None:
        self.shutdowns += 1
        self._initialized = False

    def get_runtime_context(self) -> Any:
        return types.SimpleNamespace(get_node_id=lambda: "node-abc")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kw: Any) -> FakeRay:
        ray = FakeRay(**kw)
        monkeypatch.setitem(sys.modules, "ray", ray)
        return ray

    monkeypatch.setattr(session, "_SESSION", None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    return install


def test_a_client_address_ships_this_kvbench(fake: Any) -> None:
    ray = fake()
    s = session.connect("ray://head:10001")
    ((args, kwargs),) = ray.calls
    assert args == ("ray://head:10001",)
    assert kwargs["namespace"] == "kvbench"
    shipped = kwargs["runtime_env"]["py_modules"]
    assert shipped == [str(session.kvbench_package_dir())]
    assert (Path(shipped[0]) / "cluster" / "session.py").is_file()  # the package itself
    assert s.mode == "client" and s.shipped_code and s.driver_node_id is None and s.owned
    assert s.record()["ray_version"] == "9.9.9"


def test_auto_starts_a_local_ray_when_no_cluster_answers(fake: Any) -> None:
    ray = fake(refuse_auto=True)
    s = session.connect(num_cpus=3, limits=session.ClusterLimits(cpus_per_noise_client=0.5))
    assert [c[0][:1] for c in ray.calls] == [("auto",), ()]
    assert ray.calls[1][1]["num_cpus"] == 3
    assert s.mode == "started" and not s.shipped_code  # a local Ray runs this very code
    assert s.driver_node_id == "node-abc" and s.driver_ip == "10.1.2.3"
    assert s.record()["limits"]["cpus_per_noise_client"] == 0.5
    # a second connect is the same session; new limits replace the old
    again = session.connect(limits=session.ClusterLimits(start_timeout_s=5))
    assert again is s and s.limits.start_timeout_s == 5 and len(ray.calls) == 2
    assert session.current() is s
    session.disconnect()
    assert ray.shutdowns == 1


def test_auto_reads_ray_address(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = fake()
    monkeypatch.setenv("RAY_ADDRESS", " 10.0.0.5:6379 ")
    s = session.connect()
    assert ray.calls[0][0] == ("10.0.0.5:6379",) and s.mode == "connected" and s.address == "auto"


def test_someone_elses_connection_is_used_and_left_open(fake: Any) -> None:
    ray = fake(initialized=True)
    s = session.connect("ray://ignored:1")
    assert ray.calls == [] and s.mode == "existing" and not s.owned and not s.shipped_code
    session.disconnect()
    assert ray.shutdowns == 0
    session.disconnect()  # nothing connected: nothing to do


def test_a_refused_connection_is_one_line_naming_the_address(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = fake(fail=RuntimeError("Version mismatch: 2.9 vs 2.10\ntraceback ..."))
    with pytest.raises(UsageError) as err:
        session.connect("10.0.0.9:6379")
    text = str(err.value)
    assert text.startswith(
        "cluster.address: cannot connect to Ray at 10.0.0.9:6379: Version mismatch: 2.9 vs 2.10"
    )
    assert "traceback" not in text and "RAY_AUTH_MODE=token" in text
    assert ray.shutdowns == 1  # a half-made connection is closed
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    fake(fail=RuntimeError(""))
    with pytest.raises(UsageError) as err:
        session.connect("10.0.0.9:6379")
    assert str(err.value).endswith(": RuntimeError")  # no message: the error's type, no hint


def test_avoid_puts_the_driver_and_for_noise_the_load_nodes_last() -> None:
    s = session.RaySession("auto", "connected", "1", "drv", "1.1.1.1", True, load_nodes={"w1", "w2"})
    assert s.avoid(noise=False) == {"drv"}
    assert s.avoid(noise=True) == {"drv", "w1", "w2"}
    off = session.RaySession("ray://x", "client", "1", None, None, True)
    assert off.avoid(noise=True) == set()
    assert session.is_client_address("ray://h:1") and not session.is_client_address("h:1")


def test_without_ray_the_hint_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(
        UsageError, match=r"noise on a cluster needs Ray, which is not installed: pip install"
    ):
        require_ray("noise on a cluster")
