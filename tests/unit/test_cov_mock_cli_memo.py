"""The mock's command line (`python -m kvbench.mock`), its body memo and its noise link: flags to
errors, a served announce line, which bodies are remembered and forgotten, and the link's cache."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

import pytest

from kvbench.mock import commands as C
from kvbench.mock.api.body_memo import BodyMemo
from kvbench.mock.costs.noise_link import NoiseLink
from kvbench.mock.costs.timing import derive_params
from kvbench.mock.profiles import load_profile
from kvbench.mock.spawn import fault_flags


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        C.main(list(argv))
        raise SystemExit(0)
    out = capsys.readouterr()
    code = exc.value.code
    return int(code) if isinstance(code, int) else (0 if code is None else 1), out.out, out.err


def test_parse_sets_reads_values_as_yaml() -> None:
    assert C._parse_sets(["time_scale=0.5", " ttft_ms = 20", "tiers.G4={a: 1}", "name="]) == {
        "time_scale": 0.5,
        "ttft_ms": 20,
        "tiers.G4": {"a": 1},
        "name": None,
    }


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["serve", "--set", "foo"], "kvbench mock: --set: expected KEY=VALUE, got 'foo'"),
        (["serve", "--set", "=1"], "kvbench mock: --set: expected KEY=VALUE, got '=1'"),
        (["serve", "--fault", "nope=1"], "kvbench mock: --fault: unknown fault 'nope'"),
    ],
)
def test_bad_flags_are_one_line_exit_2(monkeypatch, capsys, argv: list[str], needle: str) -> None:
    monkeypatch.setenv("KVBENCH_MOCK_MALLOPT", "0")
    code, _out, err = _main(capsys, *argv)
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and err.startswith(needle)


def test_an_unknown_profile_names_the_known_ones(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KVBENCH_MOCK_MALLOPT", "0")  # mallopt would change pytest's own process
    code, _out, err = _main(capsys, "serve", "--profile", "nosuch", "--port", "0")
    assert code == 2 and "--profile: unknown profile 'nosuch'" in err and "ci" in err


def test_profiles_lists_each_shipped_profile(capsys) -> None:
    code, out, _ = _main(capsys, "profiles")
    names = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and {"ci", "ibm-g4", "fixed-delay"} <= set(names)


class _Stdin:
    buffer = io.BytesIO(b"")  # closed at once: the server stops as soon as it has announced


def test_serve_announces_one_json_line_and_stops_at_stdin_eof(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("KVBENCH_MOCK_MALLOPT", "0")
    monkeypatch.setattr(sys, "stdin", _Stdin())
    argv = [
        "serve",
        "--port",
        "0",
        "--announce",
        "--exit-on-stdin-eof",
        "--set",
        "time_scale=0.5",
        "--fabric-port",
        "0",
        "--ground-truth",
        str(tmp_path / "gt.jsonl"),
    ]
    code, out, err = _main(capsys, *argv)
    assert code == 0
    (line,) = out.splitlines()
    info: dict[str, Any] = json.loads(line)
    assert info["base_url"].startswith("http://127.0.0.1:") and int(info["base_url"].rsplit(":", 1)[1]) > 0
    assert (info["profile"], info["time_scale"], info["pid"]) == ("ci", 0.5, os.getpid())
    assert isinstance(info["fabric_port"], int) and info["fabric_port"] > 0
    assert f"serving {info['base_url']}, fabric sink 127.0.0.1:{info['fabric_port']}" in err


def test_fault_flags_from_config_dict_or_flags() -> None:
    from kvbench.mock.faults import FaultConfig

    assert fault_flags(None) == []
    assert fault_flags({"error_rate": 0.2, "bad_sse": True}) == ["error_rate=0.2", "bad_sse=true"]
    assert fault_flags(["seed=3"]) == ["seed=3"]
    cfg = FaultConfig.model_validate({"error_rate": 0.5, "error_status": 503})
    assert sorted(fault_flags(cfg)) == ["error_rate=0.5", "error_status=503"]


# --- body memo -----------------------------------------------------------------------------------


def _counting() -> tuple[list[bytes], Any]:
    seen: list[bytes] = []

    def parse(raw: bytes) -> str:
        seen.append(raw)
        if raw.startswith(b"bad"):
            raise ValueError("not JSON")
        return raw.decode().upper()

    return seen, parse


def test_a_body_is_parsed_once_and_chat_and_completions_are_kept_apart() -> None:
    memo: BodyMemo[str] = BodyMemo()
    seen, parse = _counting()
    assert memo.get(True, b"abc", parse) == ("ABC", False)
    assert memo.get(True, b"abc", parse) == ("ABC", True)
    assert memo.get(True, b"abd", parse) == ("ABD", False)  # the same length, other bytes
    assert memo.get(False, b"abc", parse) == ("ABC", False)  # the other endpoint
    assert seen == [b"abc", b"abd", b"abc"]


def test_the_oldest_used_body_is_forgotten_first_by_count_and_by_bytes() -> None:
    memo: BodyMemo[str] = BodyMemo(entries=2, max_bytes=10)
    _seen, parse = _counting()
    memo.get(True, b"aa", parse)
    memo.get(True, b"bb", parse)
    memo.get(True, b"aa", parse)  # used again: bb is now the oldest
    memo.get(True, b"cc", parse)
    assert memo.get(True, b"aa", parse)[1] and not memo.get(True, b"bb", parse)[1]
    # bytes: a 9-byte body pushes out what no longer fits beside it
    memo.get(True, b"123456789", parse)
    assert memo.get(True, b"123456789", parse)[1]
    assert not memo.get(True, b"aa", parse)[1]
    # over max_bytes alone: parsed, never remembered
    big = b"x" * 11
    assert memo.get(True, big, parse) == ("X" * 11, False)
    assert memo.get(True, big, parse) == ("X" * 11, False)


def test_a_body_that_fails_to_parse_is_not_remembered() -> None:
    memo: BodyMemo[str] = BodyMemo()
    seen, parse = _counting()
    for _ in range(2):
        with pytest.raises(ValueError, match="not JSON"):
            memo.get(True, b"bad body", parse)
    assert seen == [b"bad body", b"bad body"]


# --- noise link ----------------------------------------------------------------------------------


def test_the_noise_link_caches_each_share_until_the_flows_change() -> None:
    params = derive_params(load_profile("ibm-g4", {"fabric.contention.loaded_latency_s": 0.5}))
    link = NoiseLink(params)
    quiet = link.share(8)
    assert link.share(8) is quiet and link.achieved(8) == 0.0
    quiet_latency, quiet_left = link.latency_s(), link.left()
    assert quiet_latency == pytest.approx(params.tier("G4").latency_s)
    link.set_flows([-1.0, 0.0, *[1.0e12] * 40])
    assert link.flows == (1.0e12,) * 40  # a flow offering nothing is no flow
    loud = link.share(8)
    assert loud is not quiet and link.share(8) is loud
    assert 0 < link.achieved(8) < 40 * 1.0e12  # the link caps what the noise gets
    # 8 reads sharing the storage link with 40 flows each get less
    assert loud.cache_each < quiet.cache_each
    assert link.read_rate(8) == pytest.approx(loud.cache_each / params.time_scale)
    # latency under load: 0.5 s times the noise's share of the link
    assert link.latency_s() == pytest.approx(quiet_latency + 0.5 * link.share(1).noise_load)
    assert link.latency_s() > quiet_latency and link.left() < quiet_left


def test_the_link_speaks_in_real_seconds_under_a_time_scale() -> None:
    params = derive_params(load_profile("ci"))
    link = NoiseLink(params)
    assert params.time_scale == pytest.approx(0.01)
    assert link.read_rate(1) == pytest.approx(100 * link.share(1).cache_each)


@pytest.mark.parametrize("argv", [["serve", "--port", "99999"], ["serve", "--bogus"]])
def test_the_mock_modules_bad_flags_are_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from kvbench.mock.commands import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("--port" in err or "--bogus" in err)
