"""What a response means for its record: status and headers, then SSE events -> token times, text, usage.

One sink per request, fed by any transport (kvbench.client.transport.base.ResponseSink), so
every rule below holds for http1 and aiohttp alike:
- a 3xx is an `http_3xx` row naming its target; any other non-2xx is `http_NNN` with the
  body's message (an HTML error page reduced to its title);
- a compressed body (kvbench asks for identity) is `compressed`, never fed to the SSE parser;
- a JSON answer to a streaming request is `not_streamed` (or `server_error` if it is an error);
- `data: [DONE]` ends the record: end_ns is that event, whatever the connection does next;
- TTFT is the first chunk that carries content or reasoning text; role-only and usage-only
  chunks never count (vLLM once shipped that bug, PR #3768).
The per-chunk path is `_sse`; the mode is chosen once, in `head`, by swapping `feed`.
Where the transport stamps reads in the kernel (`stamp`), the first token's record says so
(`clock_source`) and keeps the loop's stamp beside it (`first_token_user_ns`). Every transport
feeds one read per `feed`: the tokens the first token's read held are counted
(`first_read_tokens`; with kernel stamps such a read is `merged`: its stamp is the later
arrival), and at `close` delivery.judge says whether TTFT was the server's or a proxy's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from kvbench.client.body import ClientConfig
from kvbench.client.delivery import is_burst, judge
from kvbench.client.detail import error_detail, stream_error
from kvbench.client.record import RequestRecord
from kvbench.client.sse import SSEParser

OUTPUT_TEXT_KEEP = 4096
ERROR_BODY_KEEP = 2048  # bytes of an error body read for its message
JSON_BODY_KEEP = 64 * 1024  # bytes of a non-streamed JSON answer read to classify it
NOT_STREAMED_HINT = (
    "the server answered a streaming request with one JSON response, not an event stream "
    "(it ignores stream: true, or a gateway collects the stream); TTFT cannot be measured"
)


def _chunk_text(obj: dict[str, Any]) -> str:
    """Content or reasoning text a chunk carries ('' for role-only / usage-only chunks)."""
    choices = obj.get("choices")
    if not choices:
        return ""
    choice = choices[0]
    text = choice.get("text")
    if text:
        return str(text)
    delta = choice.get("delta")
    if delta:
        for key in ("content", "reasoning_content", "reasoning"):
            value = delta.get(key)
            if value:
                return str(value)
    return ""


class ResponseStream:
    """The client's ResponseSink: fills one RequestRecord from one response."""

    __slots__ = (
        "collected",
        "done",
        "feed",
        "kept",
        "kernel",
        "last_t",
        "merged",
        "on_first",
        "parser",
        "pieces",
        "reason",
        "rec",
        "t_user",
    )

    def __init__(self, rec: RequestRecord, cfg: ClientConfig) -> None:
        self.rec = rec
        self.parser = SSEParser(max_event_bytes=cfg.max_event_bytes)
        self.pieces: list[str] = []
        self.kept = 0
        self.done = False
        self.last_t = 0  # arrival of the latest chunk (the idle watchdog reads it)
        self.on_first: Callable[[], None] | None = None
        self.collected: bytearray | None = None
        self.reason = ""
        self.feed: Callable[[int, bytes], bool] = self._sse
        self.t_user: int | None = None  # the loop's stamp of the read being fed (set by stamp())
        self.kernel = False
        self.merged = False  # the first token's read held later tokens, kernel-stamped (TTFT: the later)

    def stamp(self, t_user: int, kernel: bool) -> None:
        self.t_user, self.kernel = t_user, kernel

    # -- the head ------------------------------------------------------------------------------------

    def head(self, t: int, status: int, reason: str, headers: Mapping[str, str]) -> bool:
        rec = self.rec
        rec.headers_ns = t
        rec.http_status = status
        self.reason = reason
        if 300 <= status < 400:
            location = headers.get("location")
            rec.fail(
                f"http_{status}",
                f"redirected to {location}: use that URL"
                if location
                else f"HTTP {status} redirect without a Location",
            )
            rec.end_ns = t
            return True
        if not 200 <= status < 300:
            self.collected = bytearray()
            self.feed = self._collect_error
            return False
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            rec.fail(
                "compressed",
                f"the event stream came {encoding}-compressed although kvbench asked for identity: "
                "a proxy compresses it (nginx: keep text/event-stream out of gzip_types)",
            )
            rec.end_ns = t
            return True
        if headers.get("content-type", "").lower().startswith("application/json"):
            self.collected = bytearray()
            self.feed = self._collect_json
        return False

    # -- the body --------------------------------------------------------------------------------------

    def _sse(self, t: int, chunk: bytes) -> bool:
        rec = self.rec
        self.last_t = t
        first_read = False  # this read (one feed is one read) carried the first token
        for ev in self.parser.feed(chunk):
            data = ev.data
            if data == "[DONE]":
                if self.parser.unknown_lines:
                    break
                self.done = True
                rec.end_ns = t
                return True
            try:
                obj = _loads(data)
            except ValueError:
                rec.fail("bad_json", f"data line is not JSON: {data[:120]!r}")
                rec.end_ns = t
                return True
            if not isinstance(obj, dict):
                rec.fail("bad_json", f"data line is not a JSON object: {data[:120]!r}")
                rec.end_ns = t
                return True
            choices = obj.get("choices")
            if not choices and (msg := stream_error(obj)) is not None:
                rec.fail("server_error", msg)
                rec.end_ns = t
                return True
            text = _chunk_text(obj) if choices else ""
            if text:
                if rec.first_token_ns is None:
                    rec.first_token_ns = t
                    rec.first_read_tokens = 0
                    first_read = True
                    if self.t_user is not None:  # the loop's stamp beside the transport's: their gap is lag
                        rec.first_token_user_ns = self.t_user
                        rec.clock_source = "kernel" if self.kernel else "user"
                    if self.on_first is not None:
                        self.on_first()
                elif first_read:
                    self.merged = self.kernel
                rec.first_read_tokens += first_read
                rec.token_ns.append(t)
                rec.output_chars += len(text)
                if self.kept < OUTPUT_TEXT_KEEP:
                    self.pieces.append(text)
                    self.kept += len(text)
            if choices and choices[0].get("finish_reason"):
                rec.finish_reason = choices[0]["finish_reason"]
            usage = obj.get("usage")
            if usage:
                _apply_usage(rec, usage)
        if self.parser.unknown_lines:
            rec.fail("bad_sse", "server sent a line that is not an SSE field")
            rec.end_ns = t
            return True
        return False

    def _collect_error(self, t: int, chunk: bytes) -> bool:
        assert self.collected is not None
        self.collected += chunk
        if len(self.collected) >= ERROR_BODY_KEEP:
            self._http_error(t)
            return True
        return False

    def _collect_json(self, t: int, chunk: bytes) -> bool:
        assert self.collected is not None
        self.collected += chunk
        if len(self.collected) >= JSON_BODY_KEEP:
            self._not_streamed(t)
            return True
        return False

    def _http_error(self, t: int) -> None:
        rec = self.rec
        body = bytes((self.collected or b"")[:ERROR_BODY_KEEP]).decode("utf-8", "replace")
        status = rec.http_status or 0
        rec.fail(f"http_{status}", error_detail(body) or self.reason or _status_phrase(status))
        rec.end_ns = t

    def _not_streamed(self, t: int) -> None:
        rec = self.rec
        rec.end_ns = t
        try:
            obj = json.loads(bytes(self.collected or b""))
        except ValueError:
            obj = None
        if isinstance(obj, dict) and (msg := stream_error(obj)) is not None:
            rec.fail("server_error", msg)
            return
        rec.fail("not_streamed", NOT_STREAMED_HINT)

    def end(self, t: int) -> None:
        """The body ended normally at t: a stream without [DONE] or finish_reason is truncated."""
        rec = self.rec
        if self.feed != self._sse:
            if self.feed == self._collect_error:
                self._http_error(t)
            else:
                self._not_streamed(t)
            return
        rec.end_ns = t
        if not self.done and rec.finish_reason is None:
            rec.fail("stream_truncated", "stream ended without [DONE] or a finish_reason")
        elif not self.done and self.parser.has_partial:
            rec.fail("stream_truncated", "stream ended inside an event")

    def close(self) -> None:
        rec = self.rec
        rec.output_text = "".join(self.pieces)[:OUTPUT_TEXT_KEEP]
        if rec.output_tokens is None and rec.token_ns:
            rec.output_tokens = len(rec.token_ns)
        rec.burst = is_burst(rec)
        rec.delivery = judge(rec)


# the C scanner json.loads ends in (an attribute the typeshed stub does not declare)
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(data: str) -> Any:
    """json.loads(data), without its two Python layers (decode, raw_decode) and their whitespace
    regexes: about half of an event's decoding. The scanner takes a value starting at index 0; any
    other shape (leading or trailing whitespace, extra data, not JSON) goes to json.loads, which
    answers or raises exactly as before."""
    try:
        obj, end = _scan(data, 0)
    except StopIteration:
        return json.loads(data)
    return obj if end == len(data) else json.loads(data)


def _apply_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    if (pt := usage.get("prompt_tokens")) is not None:
        rec.prompt_tokens_server = int(pt)
    if (ct := usage.get("completion_tokens")) is not None:
        rec.output_tokens = int(ct)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        rec.cached_tokens = int(details["cached_tokens"])


def _status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
