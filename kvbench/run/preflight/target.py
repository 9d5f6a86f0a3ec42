"""The server under test: start the embedded mock when none is named, check it answers, learn what it is.

Preflight ends with one real streaming request through the timed transport: the untimed calls
and the timed requests must see the server the same way (credentials, redirects, compression,
streaming), and a server that answers the one but not the other stops the run here, exit 3,
instead of turning every measured request into an error row. Answers a busy server gives
(429, 5xx, an error event, a timeout) prove the path works: the run goes on and the rows show
them. A cut or garbled stream is tried again, PROBE_ATTEMPTS in all, and stops the run if it
persists: every request would end the same way. When the run's longest prompt makes bodies of
SIZE_PROBE_MIN_BYTES or more, one request of that size follows, so a proxy's body limit
(HTTP 413) stops the run here rather than failing every long request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from kvbench.baseurl import REDACTED, BaseURL, redact_url
from kvbench.client import ClientConfig, RequestRecord, StreamingClient, build_body
from kvbench.client.control import ControlClient
from kvbench.client.detail import body_detail
from kvbench.engines.adapters import detect_engine
from kvbench.errors import TargetUnreachable, UsageError
from kvbench.redact import remember, secrets_of_headers, secrets_of_url
from kvbench.scenario import Scenario

# Probe failures a healthy but busy server gives (load, injected faults): its answer came through,
# so the run goes on. A stream that breaks on the way may be a one-off: tried again, stops if it
# persists. Any other failure means the timed path cannot work: stop.
_SERVER_SAID = ("timeout_", "http_429", "http_5", "server_error")
_RETRY = ("stream_truncated", "bad_sse", "bad_json")
PROBE_TIMEOUT_S = 60.0
PROBE_ATTEMPTS = 3
PROBE_BACKOFF_S = 0.5
SIZE_PROBE_MIN_BYTES = 64 * 1024  # below this no proxy's body limit is plausible (nginx's default: 1 MiB)
BYTES_PER_TOKEN = 6  # kvbench's prompt words with their space average under this: an upper estimate
_HINTS = {
    "stream_truncated": "the stream ends before [DONE] or a finish_reason: a proxy or load balancer "
    "cutting streams (read/idle timeouts, response size limits)?",
    "http_413": "the request body is larger than the target accepts (nginx: client_max_body_size)",
    "bad_sse": "the answer is not a clean event stream: a proxy rewriting it?",
    "connect_error": "the timed transport cannot connect where the untimed calls did (target.transport?)",
}


@dataclass
class TargetInfo:
    kind: str  # "mock" | "server"
    base_url: str
    model: str
    engine: str
    api: str
    mock_profile: str | None = None
    server_version: str | None = None
    max_model_len: int | None = None
    mock: Any = None  # the spawned mock handle, when kind == "mock"
    header_names: list[str] = field(default_factory=list)

    @property
    def mock_time_scale(self) -> float | None:
        """Real seconds per modelled second of the embedded mock (the report compares at that pace)."""
        return getattr(self.mock, "time_scale", None) if self.kind == "mock" else None

    def manifest(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "base_url": redact_url(self.base_url),
            "model": self.model,
            "engine": self.engine,
            "api": self.api,
            "mock_profile": self.mock_profile,
            "mock_time_scale": self.mock_time_scale,
            "server_version": self.server_version,
            "max_model_len": self.max_model_len,
            "headers": {name: REDACTED for name in self.header_names},
        }


def request_headers(scn: Scenario, api_key_env: str | None) -> dict[str, str]:
    """Extra headers plus the bearer token from the NAMED environment variable (never from a file)."""
    headers = dict(scn.target.headers)
    env_name = api_key_env or scn.target.api_key_env
    if env_name:
        key = os.environ.get(env_name)
        if not key:
            raise UsageError(f"target.api_key_env: environment variable {env_name} is not set")
        headers["Authorization"] = f"Bearer {key}"
    url = scn.target.base_url
    try:
        has_credentials = bool(url) and BaseURL.parse(url or "").has_credentials
    except ValueError as exc:
        raise UsageError(f"target.base_url: {exc}") from None
    if has_credentials and any(k.lower() == "authorization" for k in headers):
        raise UsageError(
            "target.base_url: credentials in the URL and an Authorization header (api_key_env or "
            "target.headers) cannot both be sent; keep one"
        )
    return headers


@contextlib.asynccontextmanager
async def embedded_mock(
    profile: str,
    ground_truth: Path | None,
    fabric: bool,
    persist_dir: Path | None,
    overrides: dict[str, Any] | None = None,
) -> AsyncIterator[Any]:
    try:
        from kvbench.mock.spawn import spawned_mock
    except ModuleNotFoundError:
        raise UsageError(
            "no --base-url given and kvbench's mock server is not available in this build; "
            "name a server with --base-url http://HOST:PORT"
        ) from None
    extra: list[str] = []
    for key, value in (overrides or {}).items():
        extra += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    async with spawned_mock(
        profile=profile,
        ground_truth=ground_truth,
        fabric_port=0 if fabric else None,
        persist_dir=persist_dir,
        extra_args=tuple(extra),
    ) as handle:
        yield handle


async def preflight(http: ControlClient, scn: Scenario) -> tuple[str, str | None, int | None]:
    """GET /v1/models: the model to use, the server version, the context length. Exit 3 if unreachable."""
    try:
        status, body = await http.request("GET", "/v1/models")
    except aiohttp.ClientResponseError as exc:  # it answered, but not with HTTP kvbench can read
        raise TargetUnreachable(f"{http.base_url}/v1/models: bad HTTP response: {exc.message}") from None
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TargetUnreachable(f"cannot reach {http.base_url}: {_why(exc)}") from None
    if status in (401, 403):
        raise TargetUnreachable(f"{http.base_url} refused the credentials (HTTP {status}); see --api-key-env")
    if 300 <= status < 400:
        raise TargetUnreachable(f"{http.base_url}/v1/models answered HTTP {status}, {body}")
    model = scn.target.model
    max_len: int | None = None
    if status == 200 and isinstance(body, dict) and body.get("data"):
        first = body["data"][0]
        if model is None:
            model = str(first.get("id"))
        for m in body["data"]:
            if isinstance(m, dict) and m.get("id") == model and m.get("max_model_len"):
                max_len = int(m["max_model_len"])
    elif model is None:
        raise TargetUnreachable(f"{http.base_url}/v1/models answered {_models_answer(status, body)}")
    version = None
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        vs, vb = await http.request("GET", "/version")
        if vs == 200 and isinstance(vb, dict):
            version = str(vb.get("version") or vb)
    assert model is not None
    # before the body probe builds a prompt as long as the run's longest (a 10M-token one is GBs)
    problem = scn.context_problem(scn.target.max_model_len or max_len, "the model's context")
    if problem:
        raise UsageError(problem)
    await probe_timed(http, scn, model)
    return model, version, max_len


async def probe_timed(http: ControlClient, scn: Scenario, model: str) -> RequestRecord:
    """One short streaming request through the timed transport (tried again if its stream broke),
    then one as large as the run's longest; exit 3 if that path cannot work."""
    t = scn.target.timeouts
    cfg = ClientConfig(
        base_url=http.base_url,
        model=model,
        api=scn.target.api,
        max_tokens=2,
        temperature=scn.output.temperature,
        ignore_eos=scn.output.ignore_eos,
        first_token_timeout_s=min(t.first_token_s, PROBE_TIMEOUT_S),
        total_timeout_s=min(t.total_s, PROBE_TIMEOUT_S),
        idle_timeout_s=t.idle_s,
        transport=scn.target.transport,
    )
    client = StreamingClient(cfg, http.session, time.perf_counter_ns(), http.headers)
    try:
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            rec = await client.send(
                RequestRecord(f"transport-probe-{secrets.token_hex(4)}"),
                build_body(cfg, f"kvbench transport probe {secrets.token_hex(8)}: say hello."),
            )
            if rec.ok or not (rec.error_type or "").startswith(_RETRY) or attempt == PROBE_ATTEMPTS:
                break
            await asyncio.sleep(PROBE_BACKOFF_S * attempt)
        if not rec.ok and not (rec.error_type or "").startswith(_SERVER_SAID):
            tries = f", {attempt} attempts" if attempt > 1 else ""
            raise TargetUnreachable(
                f"{http.base_url}: /v1/models answers but a timed streaming request fails "
                f"({client.transport.name} transport{tries}): {rec.error_type}: {rec.error_message}"
                + _hint(rec.error_type)
            )
        await _probe_body_size(client, replace(cfg, max_tokens=1), scn)
    finally:
        await client.aclose()
    return rec


def longest_body_tokens(scn: Scenario) -> int:
    """The most prompt tokens one timed request of the run carries (a session's whole context)."""
    return max(scn.prompts.max_length(), int(getattr(scn.test, "max_context_tokens", 0) or 0))


async def _probe_body_size(client: StreamingClient, cfg: ClientConfig, scn: Scenario) -> None:
    """One request at least as large as the run's largest body: a proxy's body limit stops the run."""
    tokens = longest_body_tokens(scn)
    size = tokens * BYTES_PER_TOKEN
    if size < SIZE_PROBE_MIN_BYTES:
        return
    client.cfg = cfg
    # " the" is one token in 4 bytes: the body is the longest prompt's size or more, never less; a
    # server that finds it past its context answers 400 at once, which passes (the size got through)
    body = build_body(cfg, f"kvbench size probe {secrets.token_hex(8)}:" + " the" * (size // 4))
    rec = await client.send(RequestRecord(f"transport-probe-size-{secrets.token_hex(4)}"), body)
    if rec.http_status == 413:
        msg = rec.error_message or ""
        said = msg if msg.startswith("413") else f"HTTP 413 {msg}".strip()
        raise TargetUnreachable(
            f"{cfg.base_url}: a timed request of {len(body) / 1024:,.0f} KiB (the run's longest prompt, "
            f"{tokens:,} tokens) was refused: {said}; " + _HINTS["http_413"]
        )


def _hint(error_type: str | None) -> str:
    hint = _HINTS.get(error_type or "")
    return f" ({hint})" if hint else ""


def _models_answer(status: int, body: object) -> str:
    """What a /v1/models answer without models said, and what to do: the page's own words first."""
    detail = body_detail(body)
    said = f"HTTP {status}" + (f" ({detail})" if detail and detail != str(status) else "")
    if status == 200:
        return f"{said} without models; name one with --model"
    if status == 404:
        return f"{said}: no OpenAI-style API at this URL (check its path), or name the model with --model"
    if status >= 500:
        return f"{said}: the server, or the one behind this proxy, is down or not ready"
    return said


def _why(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return str(exc.os_error) or "connection refused"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def identify(http: ControlClient, scn: Scenario) -> str:
    if scn.target.engine == "auto":
        return await detect_engine(http)
    return scn.target.engine


def remember_secrets(scn: Scenario, headers: dict[str, str]) -> None:
    """Every credential the run was given (API key, header values, URL userinfo of the target and of
    each exporter) is masked in all the run writes and prints, wherever it turns up (kvbench.redact)."""
    urls = [scn.target.base_url, *(e.url for e in scn.telemetry.exporters)]
    remember(*secrets_of_headers(headers), *(s for u in urls for s in secrets_of_url(u)))


def mock_accelerator_note() -> str | None:
    """Said once per run: without the C accelerator the mock is slower per block, the same model."""
    from kvbench.mock import native

    return (
        None
        if native.available()
        else "mock: no C accelerator built in this install; its pure-Python paths run"
    )
