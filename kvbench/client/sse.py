"""A pure Server-Sent Events parser over byte chunks.

Feed it chunks exactly as they come off the socket, split anywhere (inside a
line, inside a CRLF, inside a multi-byte character); it returns the complete
events so far. Follows the WHATWG rules that matter for LLM streams: lines end
in CRLF, LF or CR; `:` starts a comment; several `data:` lines join with `\n`;
a blank line dispatches the event; one space after the colon is dropped.

Lines that are not a known field are counted in `unknown_lines`: the spec says
to ignore them, but a server that sends them is broken, and a benchmark should
say so rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SSEError(ValueError):
    """Raised for input no parser should accept (invalid UTF-8, oversized event)."""


_KNOWN_FIELDS = frozenset((b"data", b"event", b"id", b"retry"))


@dataclass(slots=True)
class SSEParser:
    max_event_bytes: int = 8 * 1024 * 1024
    _buf: bytearray = field(default_factory=bytearray)
    _data: list[bytes] = field(default_factory=list)
    _data_bytes: int = 0
    _event: str = "message"
    _id: str | None = None
    _pending_cr: bool = False
    unknown_lines: int = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if (
            not self._buf
            and not self._data
            and not self._pending_cr
            and chunk[-2:] == b"\n\n"
            and chunk[:6] == b"data: "
            and b"\r" not in chunk
            and len(chunk) <= self.max_event_bytes
        ):
            fast = self._feed_data_events(chunk)
            if fast is not None:
                return fast
        return self._feed(chunk)

    def _feed_data_events(self, chunk: bytes) -> list[SSEEvent] | None:
        """The usual chunk, whole `data: X` events and nothing else, without the line machinery;
        None (nothing consumed) when the chunk holds anything else."""
        parts = chunk[:-2].split(b"\n\n")
        for part in parts:
            if part[:6] != b"data: " or b"\n" in part:
                return None
        try:
            return [SSEEvent(part[6:].decode("utf-8"), "message", self._id) for part in parts]
        except UnicodeDecodeError:
            return None  # the general path raises the error

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buf
        if self._pending_cr:
            # the previous chunk ended in CR; a LF starting this one belongs to it
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
            self._pending_cr = False
        buf += chunk
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf != -1 else n)
            if cr != -1:
                end, nxt = cr, cr + 1
                if nxt < n and buf[nxt] == 0x0A:
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True
            elif lf != -1:
                end, nxt = lf, lf + 1
            else:
                break
            self._line(bytes(buf[start:end]), events)
            start = nxt
        del buf[:start]
        if len(buf) + self._data_bytes > self.max_event_bytes:
            raise SSEError(f"event larger than {self.max_event_bytes} bytes")
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                try:
                    data = b"\n".join(self._data).decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise SSEError(f"event data is not UTF-8: {exc}") from None
                events.append(SSEEvent(data=data, event=self._event, id=self._id))
            self._data.clear()
            self._data_bytes = 0
            self._event = "message"
            return
        if line[:1] == b":":
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_bytes += len(value)
            if self._data_bytes > self.max_event_bytes:
                raise SSEError(f"event larger than {self.max_event_bytes} bytes")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            self._id = value.decode("utf-8", "replace")
        elif name not in _KNOWN_FIELDS:
            self.unknown_lines += 1

    def close(self) -> list[SSEEvent]:
        """End of stream: a final event without its blank line is NOT dispatched (per spec)."""
        return []

    @property
    def has_partial(self) -> bool:
        return bool(self._buf) or bool(self._data)


def parse_sse(chunks: list[bytes] | tuple[bytes, ...]) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(parser.feed(c))
    return out
