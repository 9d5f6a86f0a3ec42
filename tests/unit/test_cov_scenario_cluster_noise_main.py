"""Two small entry points: `--cluster` turned into scenario keys (and refused in one line), the
cluster address rule, and the old `python -m kvbench.noise send` spelling forwarded to the sender."""

from __future__ import annotations

import runpy
import sys

import pytest
from pydantic import ValidationError

from kvbench.errors import UsageError
from kvbench.scenario.cluster import ClusterSection, parse_cluster_flag


@pytest.mark.parametrize(
    ("flag", "keys"),
    [
        ("local", {"cluster.backend": "local"}),
        (" ray ", {"cluster.backend": "ray"}),
        ("ray://head:10001", {"cluster.backend": "ray", "cluster.address": "ray://head:10001"}),
    ],
)
def test_cluster_flag_sets_backend_and_address(flag: str, keys: dict[str, str]) -> None:
    assert parse_cluster_flag(flag) == keys


def test_an_unknown_cluster_flag_names_the_flag() -> None:
    with pytest.raises(UsageError) as exc:
        parse_cluster_flag("k8s")
    assert exc.value.message == "--cluster 'k8s': expected local, ray or ray://HOST:PORT"


@pytest.mark.parametrize("address", ["auto", "ray://10.0.0.1:10001", " head:6379 "])
def test_cluster_addresses_that_are_accepted(address: str) -> None:
    assert ClusterSection(address=address).address == address.strip()


@pytest.mark.parametrize("address", ["ray://head", "http://head:1", "head", "head:port", "a b:1"])
def test_cluster_addresses_that_are_refused(address: str) -> None:
    with pytest.raises(ValidationError, match="is not auto, ray://HOST:PORT or HOST:PORT"):
        ClusterSection(address=address)


def _run_noise_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> object:
    monkeypatch.setattr(sys, "argv", ["python -m kvbench.noise", *args])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("kvbench.noise", run_name="__main__", alter_sys=False)
    return exc.value.code


def test_noise_main_without_send_prints_its_usage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_noise_main(monkeypatch, "127.0.0.1", "9") == 2
    assert capsys.readouterr().err.strip() == "usage: python -m kvbench.noise send HOST PORT [options]"


def test_noise_main_send_forwards_to_the_sender_under_its_own_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_noise_main(monkeypatch, "send", "127.0.0.1", "9", "--chunk-bytes", "0") == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m kvbench.noise send ")
    assert "--chunk-bytes and --max-duration must be positive" in err
