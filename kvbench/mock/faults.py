"""Fault injection (all off by default).

Flags: ``--fault NAME[=VALUE]`` (repeatable); a bare NAME means true. The same settings
are a FaultConfig for MockServer(faults=...).

Which requests: ``error_rate`` and ``rate_limit`` are probabilities drawn per completion
request from ``random.Random(seed)`` in arrival order. Every other (stream) fault applies to
every ``every``-th completion request (requests every, 2*every, ...; every=1: all of them).
``exit_after_requests`` = n: when completion request n+1 arrives the server process exits
at once (os._exit(3)) -- only in a spawned mock; in-process the server instead aborts the
connection of every request after the n-th.

Wire behaviour (streaming; non-streaming in brackets):
  error_rate=P, error_status=500|503  status 500/503 with an OpenAI error body
  rate_limit=P, retry_after_s=S       429 with Retry-After: S
  close_after_tokens=K                transport aborted after K content chunks, no [DONE]
                                      [connection aborted before the response]
  bad_sse                             after the first content chunk, a line of garbage bytes
                                      with no "data:" field, then the stream goes on
  bad_json                            after the first content chunk, "data: {not json", goes on
                                      [the body is not JSON]
  stall_first_token_s=S               S more seconds before the first token
  stall_mid_stream_s=S                S seconds of silence after half the tokens
  giant_chunk_bytes=B                 the first content chunk carries B bytes of text
  endless_stream                      tokens until the client leaves or endless_cap_s
                                      (default 600 s) passes [a response after the cap]
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError

from kvbench.errors import UsageError
from kvbench.mock.config import StrictModel


class FaultConfig(StrictModel):
    error_rate: float = Field(default=0.0, ge=0, le=1, description="Share of requests answered error_status.")
    error_status: Literal[500, 503] = Field(default=500, description="Status of injected errors.")
    rate_limit: float = Field(default=0.0, ge=0, le=1, description="Share of requests answered 429.")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After of a 429.")
    close_after_tokens: int | None = Field(default=None, ge=0, description="Abort after K content chunks.")
    bad_sse: bool = Field(default=False, description="Send one malformed SSE line.")
    bad_json: bool = Field(default=False, description="Send one data line that is not JSON.")
    stall_first_token_s: float = Field(default=0.0, ge=0, description="Extra wait before the first token.")
    stall_mid_stream_s: float = Field(default=0.0, ge=0, description="Silence after half the tokens.")
    giant_chunk_bytes: int = Field(default=0, ge=0, description="Size of one gigantic content chunk.")
    endless_stream: bool = Field(default=False, description="Stream until the client leaves (capped).")
    endless_cap_s: float = Field(default=600.0, gt=0, le=600, description="Hard cap of an endless stream.")
    exit_after_requests: int | None = Field(default=None, ge=0, description="Exit when request n+1 arrives.")
    every: int = Field(default=1, ge=1, description="Stream faults hit every N-th request.")
    seed: int = Field(default=0, description="Seed of the error_rate / rate_limit draws.")

    @property
    def any_stream_fault(self) -> bool:
        return bool(
            self.close_after_tokens is not None
            or self.bad_sse
            or self.bad_json
            or self.stall_first_token_s
            or self.stall_mid_stream_s
            or self.giant_chunk_bytes
            or self.endless_stream
        )


def _scalar(text: str) -> Any:
    text = text.strip()
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_fault_flags(flags: list[str] | tuple[str, ...]) -> FaultConfig:
    """FaultConfig from `--fault NAME[=VALUE]` strings; UsageError on a bad one."""
    known = list(FaultConfig.model_fields)
    data: dict[str, Any] = {}
    for flag in flags:
        name, sep, value = flag.partition("=")
        name = name.strip().replace("-", "_")
        if name not in known:
            raise UsageError(f"--fault: unknown fault {name!r} (known: {', '.join(known)})")
        data[name] = _scalar(value) if sep else True
    try:
        return FaultConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise UsageError(f"--fault {loc}: {err['msg']} (got {err.get('input')!r})") from None


@dataclass(frozen=True)
class FaultDecision:
    number: int
    exit_process: bool = False
    abort: bool = False
    error_status: int | None = None
    rate_limited: bool = False
    stream_faults: bool = False


class FaultPlan:
    """Decides, per completion request in arrival order, which faults apply."""

    def __init__(self, config: FaultConfig | None) -> None:
        self.config = config or FaultConfig()
        self._rng = random.Random(self.config.seed)
        self.count = 0

    def next(self) -> FaultDecision:
        c = self.config
        self.count += 1
        n = self.count
        if c.exit_after_requests is not None and n > c.exit_after_requests:
            return FaultDecision(n, exit_process=True, abort=True)
        status = None
        if c.error_rate and self._rng.random() < c.error_rate:
            status = c.error_status
        limited = bool(c.rate_limit) and status is None and self._rng.random() < c.rate_limit
        return FaultDecision(
            n,
            error_status=status,
            rate_limited=limited,
            stream_faults=c.any_stream_fault and n % c.every == 0,
        )
