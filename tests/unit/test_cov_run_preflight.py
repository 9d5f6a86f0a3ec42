"""Preflight (kvbench.run.preflight.target, .limits): what /v1/models answers decides the model, the
context check and the exit; headers and credentials; the timed probe against the embedded mock
(in-process), a broken stream tried again; the open-files budget. Every refusal is one line that
names the field or the URL."""

from __future__ import annotations

import errno
import os
from typing import Any

import aiohttp
import pytest

from kvbench.client.control import ControlClient, make_session
from kvbench.errors import TargetUnreachable, UsageError
from kvbench.mock.api.server import MockServer
from kvbench.run.preflight import limits
from kvbench.run.preflight import target as target_mod
from kvbench.run.preflight.target import (
    longest_body_tokens,
    preflight,
    probe_timed,
    request_headers,
)
from kvbench.scenario import Scenario


def scenario(lengths: list[int] | None = None, **target: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "pf",
            "test": "throughput",
            "target": {"base_url": "http://127.0.0.1:9", **target},
            "prompts": {"count": 1, "lengths": lengths or [100]},
            "load": {"kind": "concurrent", "concurrency": 4, "requests": 4},
            "output": {"max_tokens": 16},
        }
    )


class Models:
    """/v1/models and /version as a server answers them (or raises)."""

    base_url = "http://srv:8000"

    def __init__(self, status: int, body: Any = None, error: BaseException | None = None) -> None:
        self.status, self.body, self.error = status, body, error

    async def request(self, method: str, path: str) -> tuple[int, Any]:
        if path == "/version":
            return 200, {"version": "0.9.1"}
        if self.error is not None:
            raise self.error
        return self.status, self.body


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []

    async def probe(http: Any, scn: Scenario, model: str) -> None:
        sent.append(model)

    monkeypatch.setattr(target_mod, "probe_timed", probe)
    return sent


async def test_the_first_listed_model_is_used_with_its_context_length(probes) -> None:
    body = {"data": [{"id": "a", "max_model_len": 8192}, {"id": "b", "max_model_len": 512}]}
    assert await preflight(Models(200, body), scenario()) == ("a", "0.9.1", 8192)  # type: ignore[arg-type]
    named = await preflight(Models(200, body), scenario(model="b"))  # type: ignore[arg-type]
    assert named == ("b", "0.9.1", 512) and probes == ["a", "b"]


async def test_a_prompt_longer_than_the_models_context_is_refused_before_the_probe(probes) -> None:
    body = {"data": [{"id": "a", "max_model_len": 600}]}
    with pytest.raises(UsageError) as info:
        await preflight(Models(200, body), scenario([590]))  # type: ignore[arg-type]
    assert (
        str(info.value)
        == "prompts.lengths: longest prompt + max_tokens = 606 exceeds the model's context 600"
    )
    assert probes == []


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (401, {}, "http://srv:8000 refused the credentials (HTTP 401); see --api-key-env"),
        (302, "elsewhere", "http://srv:8000/v1/models answered HTTP 302, elsewhere"),
        (200, {"data": []}, "answered HTTP 200 without models; name one with --model"),
        (404, {"detail": "Not Found"}, "HTTP 404 (Not Found): no OpenAI-style API at this URL"),
        (502, "Bad Gateway", "HTTP 502 (Bad Gateway): the server, or the one behind this proxy, is down"),
        (418, {"error": {"message": "teapot"}}, "http://srv:8000/v1/models answered HTTP 418 (teapot)"),
    ],
)
async def test_a_models_answer_without_a_model_stops_the_run_saying_why(probes, status, body, said) -> None:
    with pytest.raises(TargetUnreachable) as info:
        await preflight(Models(status, body), scenario())  # type: ignore[arg-type]
    assert said in str(info.value) and "\n" not in str(info.value) and probes == []


async def test_a_named_model_needs_no_list(probes) -> None:
    assert await preflight(Models(404, {}), scenario(model="m")) == ("m", "0.9.1", None)  # type: ignore[arg-type]


async def test_an_unreachable_server_is_exit_3_with_the_cause(probes) -> None:
    with pytest.raises(TargetUnreachable, match=r"^cannot reach http://srv:8000: TimeoutError$"):
        await preflight(Models(0, error=TimeoutError()), scenario())  # type: ignore[arg-type]
    with pytest.raises(TargetUnreachable, match=r"^cannot reach http://srv:8000: OSError: no route$"):
        await preflight(Models(0, error=OSError("no route")), scenario())  # type: ignore[arg-type]
    bad = aiohttp.ClientResponseError(None, (), message="Expected HTTP/")  # type: ignore[arg-type]
    with pytest.raises(TargetUnreachable, match=r"/v1/models: bad HTTP response: Expected HTTP/$"):
        await preflight(Models(0, error=bad), scenario())  # type: ignore[arg-type]


def test_the_api_key_comes_from_the_named_variable_only(monkeypatch) -> None:
    monkeypatch.delenv("KVB_TEST_KEY", raising=False)
    with pytest.raises(
        UsageError, match=r"^target\.api_key_env: environment variable KVB_TEST_KEY is not set$"
    ):
        request_headers(scenario(api_key_env="KVB_TEST_KEY"), None)
    monkeypatch.setenv("KVB_TEST_KEY", "sk-123")
    headers = request_headers(scenario(headers={"X-Team": "kv"}), "KVB_TEST_KEY")
    assert headers == {"X-Team": "kv", "Authorization": "Bearer sk-123"}
    with pytest.raises(UsageError, match=r"^target\.base_url: credentials in the URL and an Authorization"):
        request_headers(scenario(base_url="http://u:p@127.0.0.1:9"), "KVB_TEST_KEY")
    assert request_headers(scenario(base_url="http://u:p@127.0.0.1:9"), None) == {}


def test_the_longest_body_is_the_longest_prompt_or_a_sessions_context() -> None:
    assert longest_body_tokens(scenario([100, 3000, 20])) == 3000


async def probe_against(
    faults: list[str] | dict[str, Any], monkeypatch, lengths: list[int] | None = None
) -> Any:
    monkeypatch.setattr(target_mod, "PROBE_BACKOFF_S", 0.0)
    async with MockServer("ci", faults=faults, profile_overrides={"time_scale": 0.01}) as srv:
        session = make_session(2, 5.0)
        try:
            http = ControlClient(session, srv.base_url, {})
            return await probe_timed(http, scenario(lengths, base_url=srv.base_url), "m")
        finally:
            await session.close()


async def test_the_timed_probe_passes_against_a_healthy_server_and_a_busy_one(monkeypatch) -> None:
    rec = await probe_against([], monkeypatch)
    assert rec.ok and rec.first_token_ns is not None
    busy = await probe_against({"error_rate": 1.0, "error_status": 503}, monkeypatch)
    assert not busy.ok and busy.error_type.startswith("http_5")  # the server answered: the path works


async def test_a_stream_that_always_breaks_is_tried_thrice_then_stops_the_run(monkeypatch) -> None:
    with pytest.raises(TargetUnreachable) as info:
        await probe_against({"close_after_tokens": 0}, monkeypatch)
    msg = str(info.value)
    assert "a timed streaming request fails" in msg and "3 attempts" in msg and "stream_truncated" in msg
    assert "a proxy or load balancer cutting streams" in msg and "\n" not in msg


# --- open files ----------------------------------------------------------------------------------


def test_too_few_open_files_even_at_the_hard_limit_is_one_line_with_the_sum(monkeypatch) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _r: (256, 512))
    monkeypatch.setattr(resource, "setrlimit", lambda _r, _v: (_ for _ in ()).throw(ValueError("no")))
    monkeypatch.setattr(limits, "_in_use", lambda: 10)
    budget = limits.FdBudget(connections=1000, exporters=1, children=2)
    need = budget.need(10)
    assert (
        need == 1000 + 10 + limits.RUN_FILES + limits.CONTROL_FDS + 1 + 2 * limits.PER_PROCESS + limits.MARGIN
    )
    with pytest.raises(UsageError) as info:
        limits.ensure_open_files(budget)
    msg = str(info.value)
    assert msg.startswith("open files: this run opens up to 1,000 connections and needs ")
    assert f"`ulimit -n {need}`" in msg and "may open 256 (hard limit 512)" in msg and "\n" not in msg


def test_the_soft_limit_is_raised_toward_the_need(monkeypatch) -> None:
    import resource

    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (256, resource.RLIM_INFINITY))
    monkeypatch.setattr(resource, "setrlimit", lambda _r, v: set_to.append(v))
    monkeypatch.setattr(limits, "_in_use", lambda: 10)
    soft, _ = limits.ensure_open_files(400)
    assert soft == limits.FdBudget(400).need(10) and set_to == [(soft, resource.RLIM_INFINITY)]


def test_a_worker_inherits_the_limit_so_its_own_connections_must_fit() -> None:
    scn = Scenario.model_validate(
        {
            "name": "w",
            "test": "throughput",
            "prompts": {"count": 1, "lengths": [100]},
            "load": {"kind": "concurrent", "concurrency": 900, "requests": 900, "workers": 4},
        }
    )
    budget = limits.fd_budget(scn)
    assert (budget.connections, budget.worker_connections, budget.children) == (0, 225, 4)
    assert budget.need(0) == max(
        sum(n for _, n in budget.parts(0)), 225 + limits.RUN_FILES + limits.CONTROL_FDS + limits.MARGIN
    )


@pytest.mark.parametrize(
    ("message", "local"),
    [
        (f"Cannot connect [Errno {errno.EMFILE}] Too many open files", True),
        (f"Cannot connect [Errno {errno.EADDRNOTAVAIL}] x", True),
        ("Cannot connect [Errno 111] Connection refused", False),
        (f"socket: {os.strerror(errno.ENOBUFS)}", True),
        ("timed out", False),
    ],
)
def test_a_local_kernel_failure_is_told_from_the_servers(message: str, local: bool) -> None:
    assert limits.is_client_limit("connect_error", message) is local
    assert limits.is_client_limit("http_500", message) is False
