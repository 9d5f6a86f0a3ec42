"""The mock OpenAI-compatible server: MockServer runs a MockApp (aiohttp.web) in the current loop.

The mock's modules, from the wire in:
  server.py       MockServer: resolves the profile (name or model, plus dotted overrides) and the
                  faults, listens (port 0 = a free one), starts the fabric sink for tcp noise
  app.py          MockApp: state, routes, the small endpoints (/v1/models, /tokenize, /metrics, ...)
  completions.py  /v1/completions and /v1/chat/completions: trace, request faults, validation
  responses.py    the one token loop, with an SSE and a JSON body writer
  http.py         OpenAI-shaped errors, JSON bodies, connection aborts

Endpoints
  GET  /v1/models                       one model, owned_by "kvbench-mock"
  POST /v1/completions                  streaming (SSE) or not; usage with cached_tokens
  POST /v1/chat/completions             streaming: a role-only first chunk, then content deltas
  POST /tokenize, /detokenize           vLLM's shapes (tokenizer.py explains the tokenizer)
  GET  /health, /version, /metrics      metrics: Prometheus text (metrics.py)
  POST /reset_prefix_cache              {"success": true} after emptying every tier (or
                                        ?tiers=G1,G2 only those); a
                                        persisted G4 (--persist-dir) only with
                                        ?include_persistent=true or the profile's
                                        reset_clears_persistent
Requests: max_tokens (or max_completion_tokens) default 16; the mock never stops early,
so ignore_eos changes nothing; temperature 0 gives text derived from the prompt alone
(identical prompts, identical text; cold and warm match); any other temperature draws
words from `seed` if given, else at random. Any `model` value is accepted.
`X-Request-Id` is recorded in the ground truth (one is made up when absent) and echoed.
Streams carry `X-Accel-Buffering: no`, so that a reverse proxy passes tokens on as they come.

Ground truth (`ground_truth=PATH`): one JSON line per completion request, written when it
ends; fields in engine.Trace. Times are real (already multiplied by time_scale).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from kvbench.errors import UsageError
from kvbench.mock.api.app import MockApp, mock_version
from kvbench.mock.config import FixedDelayProfile, TieredProfile
from kvbench.mock.costs.fabric import FabricSink
from kvbench.mock.faults import FaultConfig, parse_fault_flags


def _resolve_profile(profile: Any, overrides: dict[str, Any] | None) -> TieredProfile | FixedDelayProfile:
    from kvbench.mock.profiles import load_profile, override_profile

    if isinstance(profile, str):
        result: TieredProfile | FixedDelayProfile = load_profile(profile, overrides)
        return result
    if isinstance(profile, TieredProfile | FixedDelayProfile):
        validated: TieredProfile | FixedDelayProfile = override_profile(profile, overrides)
        return validated
    raise UsageError(f"profile: expected a name or a profile model, got {type(profile).__name__}")


def _resolve_faults(faults: Any) -> FaultConfig:
    if faults is None:
        return FaultConfig()
    if isinstance(faults, FaultConfig):
        return faults
    if isinstance(faults, dict):
        return FaultConfig.model_validate(faults)
    if isinstance(faults, list | tuple):
        return parse_fault_flags(list(faults))
    raise UsageError(f"faults: expected FaultConfig, dict or flag list, got {type(faults).__name__}")


class MockServer:
    """The mock, serving in the current event loop: ``async with MockServer(...) as srv``.

    profile: a profile name (kvbench.mock.profiles) or a TieredProfile / FixedDelayProfile.
    port: 0 picks a free port. fabric_port: None = no fabric sink; 0 = a free port.
    faults: FaultConfig, a dict of its fields, or a list of "NAME[=VALUE]" flags.
    profile_overrides: dotted keys applied to the profile, e.g. {"time_scale": 0.01}.
    exit_process_on_fault: let exit_after_requests call os._exit (only for a spawned mock).
    """

    def __init__(
        self,
        profile: str | TieredProfile | FixedDelayProfile = "ci",
        host: str = "127.0.0.1",
        port: int = 0,
        ground_truth: str | Path | None = None,
        fabric_port: int | None = None,
        faults: FaultConfig | dict[str, Any] | list[str] | None = None,
        persist_dir: str | Path | None = None,
        *,
        profile_overrides: dict[str, Any] | None = None,
        exit_process_on_fault: bool = False,
    ) -> None:
        self.profile: TieredProfile | FixedDelayProfile = _resolve_profile(profile, profile_overrides)
        self.host = host
        self.port = port
        self.ground_truth = Path(ground_truth) if ground_truth is not None else None
        self.fabric_port = fabric_port
        self.faults = _resolve_faults(faults)
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.exit_process_on_fault = exit_process_on_fault
        self.fabric_address: tuple[str, int] | None = None
        self.app: MockApp | None = None
        self._runner: web.AppRunner | None = None
        self._sink: FabricSink | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> MockServer:
        self.app = MockApp(
            self.profile, self.ground_truth, self.faults, self.persist_dir, self.exit_process_on_fault
        )
        self._runner = web.AppRunner(self.app.build(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise UsageError(
                f"--port: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        addresses = self._runner.addresses  # (host, port, ...) of every listening socket
        assert addresses, "the site is not listening"
        self.port = int(addresses[0][1])
        if self.fabric_port is not None:
            scale = self.profile.fabric.noise_scale if isinstance(self.profile, TieredProfile) else 1.0
            self._sink = FabricSink(
                self.host, self.fabric_port, scale, self.app.engine.set_noise_rate, self.app.metrics
            )
            self.fabric_address = await self._sink.start()
        return self

    async def stop(self) -> None:
        if self._sink is not None:
            await self._sink.close()
            self._sink = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.app is not None:
            self.app.close()
            self.app = None

    async def __aenter__(self) -> MockServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


__all__ = ["MockApp", "MockServer", "mock_version"]
