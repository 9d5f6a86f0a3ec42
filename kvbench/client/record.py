"""RequestRecord: everything one timed request produced, failed ones included; and burst detection.

A request is a row, never an exception: status, error type and message, partial output and
every timestamp (ns since the run's clock origin) go to requests.jsonl as one line.

Burst detection: behind a buffering proxy (nginx's default `proxy_buffering on`) the response
headers, the first token and the whole answer arrive together when generation ends, so TTFT
reads as the full request time. A multi-token answer whose first and last tokens arrive within
BURST_NS of the headers is flagged; a phase where most answers are flagged gets a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

BURST_NS = 1_000_000
BURST_WARNING = (
    "tokens arrived in one burst with the response headers ({flagged} of {total} answers): "
    "a buffering proxy? nginx: proxy_buffering off or X-Accel-Buffering: no"
)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    phase: str = ""
    label: str = ""
    repetition: int = 0
    prompt_id: int = -1
    prompt_tokens_requested: int = 0
    prompt_tokens: int = 0
    prompt_tokens_server: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    scheduled_ns: int | None = None
    sent_ns: int | None = None
    headers_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    status: str = "ok"
    http_status: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    output_chars: int = 0
    output_text: str = ""
    noise_active: bool = False
    attempt: int = 1
    finish_reason: str | None = None
    burst: bool = False  # first and last of several tokens within BURST_NS of the headers
    clock_source: str = "user"  # "kernel": the first token's time is the kernel's RX stamp (kstamp)
    first_token_user_ns: int | None = None  # when the loop got to the first token (http1 only)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def fail(self, error_type: str, message: str, status: str = "error") -> None:
        self.status = status
        self.error_type = error_type
        self.error_message = message.splitlines()[0][:500] if message else error_type

    def to_row(self) -> dict[str, Any]:
        def ms(a: int | None, b: int | None) -> float | None:
            return None if a is None or b is None else (a - b) / 1e6

        gaps = [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)]
        return {
            "request_id": self.request_id,
            "phase": self.phase,
            "label": self.label,
            "repetition": self.repetition,
            "prompt_id": self.prompt_id,
            "prompt_tokens_requested": self.prompt_tokens_requested,
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_server": self.prompt_tokens_server,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "scheduled_ns": self.scheduled_ns,
            "sent_ns": self.sent_ns,
            "headers_ns": self.headers_ns,
            "first_token_ns": self.first_token_ns,
            "end_ns": self.end_ns,
            "token_ns": self.token_ns,
            "ttft_ms": ms(self.first_token_ns, self.sent_ns),
            "e2e_ms": ms(self.end_ns, self.sent_ns),
            "dispatch_delay_ms": ms(self.sent_ns, self.scheduled_ns),
            "itl_ms_mean": (sum(gaps) / len(gaps) / 1e6) if gaps else None,
            "status": self.status,
            "http_status": self.http_status,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "output_chars": self.output_chars,
            "output_text": self.output_text,
            "noise_active": self.noise_active,
            "attempt": self.attempt,
            "finish_reason": self.finish_reason,
            "burst": self.burst,
            "clock_source": self.clock_source,
            "first_token_user_ns": self.first_token_user_ns,
            "first_token_lag_ms": ms(self.first_token_user_ns, self.first_token_ns),
        }


def is_burst(rec: RequestRecord) -> bool:
    """True when a multi-token answer arrived, first to last token, within BURST_NS of its headers."""
    tokens = rec.token_ns
    return rec.headers_ns is not None and len(tokens) >= 2 and tokens[-1] - rec.headers_ns <= BURST_NS


def burst_warning(records: Iterable[RequestRecord]) -> str | None:
    """The warning for a phase whose answers mostly came in one burst; None otherwise."""
    total = flagged = 0
    for rec in records:
        if rec.ok and len(rec.token_ns) >= 2:
            total += 1
            flagged += rec.burst
    if total and flagged * 2 > total:
        return BURST_WARNING.format(flagged=flagged, total=total)
    return None
