"""The server under test: start the embedded mock when none is named, check it answers, learn what it is."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kvbench.cache import TargetHTTP, detect_engine
from kvbench.errors import TargetUnreachable, UsageError
from kvbench.scenario import Scenario

REDACTED = "<redacted>"


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
            "base_url": self.base_url,
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


async def preflight(http: TargetHTTP, scn: Scenario) -> tuple[str, str | None, int | None]:
    """GET /v1/models: the model to use, the server version, the context length. Exit 3 if unreachable."""
    try:
        status, body = await http.request("GET", "/v1/models")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TargetUnreachable(f"cannot reach {http.base_url}: {_why(exc)}") from None
    if status in (401, 403):
        raise TargetUnreachable(f"{http.base_url} refused the credentials (HTTP {status}); see --api-key-env")
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
        raise TargetUnreachable(
            f"{http.base_url}/v1/models answered HTTP {status} without models; name one with --model"
        )
    version = None
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        vs, vb = await http.request("GET", "/version")
        if vs == 200 and isinstance(vb, dict):
            version = str(vb.get("version") or vb)
    assert model is not None
    return model, version, max_len


def _why(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return str(exc.os_error) or "connection refused"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def identify(http: TargetHTTP, scn: Scenario) -> str:
    if scn.target.engine == "auto":
        return await detect_engine(http)
    return scn.target.engine
