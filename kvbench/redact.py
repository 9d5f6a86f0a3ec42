"""The one place a URL, a header or any text becomes safe to write: every record kvbench writes goes
through `redact` (scenario.yaml, manifest, sweep.json, telemetry rows, exporter records, console
lines, the /metrics it serves).

What it removes, from any source (the user's input, the target, an exporter):
- userinfo in a URL (`http://user:pw@host` → `http://<redacted>@host`), wherever the URL sits in text;
- the values of headers that carry credentials (Authorization, Proxy-Authorization, Cookie, API keys);
- credentials echoed in text: `Basic <token>`, `Bearer <token>`, `Token <token>`, whatever the token;
- every secret this process was given (API key, header values, URL passwords: `remember`), raw and
  as base64 (an `Authorization: Basic` value is base64 of `user:password`).
Imports nothing from kvbench: it sits at the bottom so every layer can call it.
"""

from __future__ import annotations

import base64
import re
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

REDACTED = "<redacted>"
_MIN_SECRET = 4  # shorter header values ("1", "on") would blank out ordinary words

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "x-auth-token",
        "x-access-token",
        "openai-api-key",
    }
)
_SCHEMES = ("basic", "bearer", "token")
# a scheme word, then its credential in RFC 7235's token68 alphabet (base64, base64url); the word
# alone ("basic delivery", "token rate") is ordinary text, so the credential must look like one
_ECHOED = re.compile(r"(?i)\b(basic|bearer|token)(\s+|%20|\+)([A-Za-z0-9._~+/-]{6,}=*)")
_CREDENTIAL_LIKE = re.compile(r"[0-9+/=_.~-]|.[A-Z]")
# scheme://userinfo@ anywhere in text; the userinfo stops at what cannot be in it
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@<>\"']+@")
_KEY_VALUE = re.compile(
    r"(?i)\b(api[_-]?key|access[_-]?token|password|passwd|secret)([\"']?\s*[=:]\s*[\"']?)([^\s\"'&,;}]{4,})"
)

_known: set[str] = set()
_ordered: tuple[str, ...] = ()


def remember(*secrets: str | None) -> None:
    """Secrets this process holds (API key, header values, URL credentials): masked in all it writes,
    raw and base64-encoded."""
    global _ordered
    for s in secrets:
        if not s or len(s) < _MIN_SECRET:
            continue
        _known.update(_forms(s))
    # longest first: a key must go before a shorter secret that is part of it
    _ordered = tuple(sorted(_known, key=len, reverse=True))


def _forms(secret: str) -> set[str]:
    b64 = base64.b64encode(secret.encode()).decode("ascii")
    forms = {secret, b64, b64.rstrip("=")}
    return {f for f in forms if len(f) >= _MIN_SECRET}


def secrets_of_url(url: str | None) -> list[str]:
    """The user name, password and their `Basic` token of a URL's userinfo (nothing when none)."""
    if not url or "@" not in url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    user = unquote(parts.username) if parts.username else None
    pw = unquote(parts.password) if parts.password else None
    out = [s for s in (pw, user) if s]
    if user is not None:
        out.append(base64.b64encode(f"{user}:{pw or ''}".encode()).decode("ascii"))
    return out


def secrets_of_headers(headers: dict[str, str] | None) -> list[str]:
    """Every header value, and the credential after a Basic / Bearer / Token scheme word."""
    out: list[str] = []
    for value in (headers or {}).values():
        out.append(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in _SCHEMES:
            out.append(token)
    return out


def redact_url(url: str | None) -> str | None:
    """`url` with any userinfo replaced by `<redacted>`; anything unparsable is kept but its userinfo."""
    if not url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority_end = min(
        (i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest)
    )
    authority = rest[:authority_end]
    if "@" not in authority:
        return url
    host = authority.rpartition("@")[2]
    return f"{scheme}://{REDACTED}@{host}{rest[authority_end:]}"


def redact_text(text: str, extra: tuple[str, ...] = ()) -> str:
    """`text` with URL userinfo, echoed credentials and every remembered secret masked."""
    if not text:
        return text
    # userinfo first: masking a remembered user name inside it would leave `<redacted>:pw@`, which
    # the userinfo pattern (no `<` in userinfo) no longer sees, and a short password would show
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    for secret in extra + _ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _ECHOED.sub(_mask_scheme, text)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def _mask_scheme(m: re.Match[str]) -> str:
    if not _CREDENTIAL_LIKE.search(m.group(3)):
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{REDACTED}"


T = TypeVar("T")


def redact(value: T, extra: tuple[str, ...] = ()) -> T:
    """THE function: any value kvbench writes (text, a URL, a headers dict, a whole JSON-able
    record) with every credential masked; mappings keep their keys, secret headers lose their value."""
    return _walk(value, extra)


def _walk(value: Any, extra: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact_text(value, extra)
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and k.lower() in SECRET_HEADERS and v else _walk(v, extra))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_walk(v, extra) for v in value]
    if isinstance(value, tuple):
        return tuple(_walk(v, extra) for v in value)
    return value


class Redactor:
    """`redact_text` with this client's own secrets (its headers, its URL's credentials) added."""

    __slots__ = ("secrets",)

    def __init__(self, headers: dict[str, str] | None = None, url: str | None = None) -> None:
        found: set[str] = set()
        for s in [*secrets_of_headers(headers), *secrets_of_url(url)]:
            if len(s) >= _MIN_SECRET:
                found.update(_forms(s))
        remember(*found)
        self.secrets = tuple(sorted(found, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        return redact_text(text, self.secrets)


class RedactingStream:
    """A text stream (the CLI's stdout or stderr) whose every line goes through `redact` before it
    reaches the real one. Text is held to the end of its line so a secret written in two pieces is
    still one string when masked; `flush` lets a partial line through (a live `\\r` line).

    `.buffer` is redacted too (`_RedactingBuffer`): click writes bytes there (`echo(b"...")`, and a
    text stream it finds misconfigured is rewrapped around it), so passing the real one through
    would let those bytes skip the masking. At most one side holds a partial line at a time: each
    lets the other's out first, so text and bytes reach the terminal in the order written."""

    _HOLD_MAX = 1 << 16  # a line this long without a newline goes out anyway

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._pending = ""
        self._binary: _RedactingBuffer | None = None

    @property
    def buffer(self) -> _RedactingBuffer:
        if self._binary is None:
            raw = getattr(self.stream, "buffer", None)
            if raw is None:  # a StringIO has none: neither have we
                raise AttributeError("buffer")
            self._binary = _RedactingBuffer(self, raw)
        return self._binary

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a text stream refuses bytes (click probes with b"")
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self._binary is not None:
            self._binary.release()
        held = self._pending + text
        head, newline, tail = held.rpartition("\n")
        if newline:
            self.stream.write(redact(head + newline))
        self._pending = tail
        if len(self._pending) > self._HOLD_MAX:
            self._release()
        return len(text)

    def _release(self) -> None:
        if self._pending:
            text, self._pending = self._pending, ""
            self.stream.write(redact(text))

    def flush(self) -> None:
        if self._binary is not None:
            self._binary.flush()
        self._release()
        self.stream.flush()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, errors...: the real stream's
        if name == "buffer":  # reached only when the property found no real buffer
            raise AttributeError(name)
        return getattr(self.stream, name)


class _RedactingBuffer:
    """The binary side of a `RedactingStream`: bytes held to the end of their line, decoded in the
    stream's encoding, masked and encoded back. surrogateescape both ways, so bytes that are not
    text in that encoding come out exactly as they went in."""

    def __init__(self, owner: RedactingStream, raw: Any) -> None:
        self._owner = owner
        self._raw = raw
        self._encoding = getattr(owner.stream, "encoding", None) or "utf-8"
        self._pending = b""

    def write(self, data: Any) -> int:
        if isinstance(data, str):  # a binary stream refuses text (click's probe relies on it)
            raise TypeError("a bytes-like object is required, not 'str'")
        data = bytes(memoryview(data))  # bytes(5) would be five zero bytes
        held = self._pending + data
        head, newline, tail = held.rpartition(b"\n")
        self._pending = tail
        if newline:
            self._out(head + newline)
        if len(self._pending) > RedactingStream._HOLD_MAX:
            self.release()
        return len(data)

    def _out(self, data: bytes) -> None:
        # the text side's earlier words first, held partial line and the real stream's own buffer
        self._owner._release()
        self._owner.stream.flush()
        text = data.decode(self._encoding, "surrogateescape")
        self._raw.write(redact(text).encode(self._encoding, "surrogateescape"))

    def release(self) -> None:
        if self._pending:
            data, self._pending = self._pending, b""
            self._out(data)

    def flush(self) -> None:
        self.release()
        self._raw.flush()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # writable, closed, fileno...: the real buffer's
        return getattr(self._raw, name)


class RedactingFilter:
    """A logging filter that masks a record's message and traceback before any handler formats it
    (installed on logging.lastResort: a stray library warning is printed through it)."""

    def filter(self, record: Any) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            import traceback

            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info))).rstrip("\n")
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
