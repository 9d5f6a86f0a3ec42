"""RequestRecord: everything one timed request produced, failed ones included.

A request is a row, never an exception: status, error type and message, partial output and
every timestamp (ns since the run's clock origin) go to requests.jsonl as one line. Whether
its TTFT is the server's or a proxy's delivery (`burst`, `delivery`) is judged in delivery.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    burst: bool = False  # first and last of several tokens within 1 ms of the headers (delivery.is_burst)
    first_read_tokens: int = 0  # content tokens the read that carried the first one held
    delivery: str | None = None  # burst | batched: TTFT is how a proxy delivered it (delivery.judge)
    clock_source: str = "user"  # "kernel": the first token's time is the kernel's RX stamp (kstamp)
    first_token_user_ns: int | None = None  # when the loop got to the first token (http1 only)
    send_clock_source: str = (
        "user"  # "kernel_tx": sent_ns is the kernel's TX stamp of the last byte (txstamp)
    )
    sent_user_ns: int | None = None  # kernel_tx rows: the loop's stamp before the write (user rows: sent_ns)

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
            "first_read_tokens": self.first_read_tokens,
            "delivery": self.delivery,
            "clock_source": self.clock_source,
            "first_token_user_ns": self.first_token_user_ns,
            "first_token_lag_ms": ms(self.first_token_user_ns, self.first_token_ns),
            "send_clock_source": self.send_clock_source,
            "sent_user_ns": self.sent_user_ns,
            "send_lag_ms": ms(self.sent_ns, self.sent_user_ns),
        }
