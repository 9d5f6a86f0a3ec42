"""The target's base URL, parsed once: where to connect, what to put in `Host`, and what never to print.

A base URL may carry credentials (`http://user:pw@host:port`, the usual way to reach a server
behind a proxy's basic auth). They are not part of the address: `Host` is `hostname[:port]`
(brackets for IPv6) and the credentials become an `Authorization: Basic` header on every
request, timed and untimed alike, so both paths see the server the same way. Wherever a URL is
stored or printed, its credentials are replaced by `<redacted>` (kvbench.redact, the one place every
record goes through; `Redactor` does the same for secrets a server echoes back in an error body).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

# redaction lives in kvbench.redact, the one place; these names stay importable from here
from kvbench.redact import REDACTED, Redactor, redact_url

__all__ = ["REDACTED", "BaseURL", "Redactor", "auth_headers", "redact_url"]


@dataclass(frozen=True, slots=True)
class BaseURL:
    """A parsed http(s) URL without its credentials; `userinfo` holds them, decoded."""

    scheme: str
    hostname: str
    port: int | None  # as written; None = the scheme's default
    path: str  # "" or "/prefix" (no trailing slash), query included
    username: str | None = None
    password: str | None = None

    @staticmethod
    def parse(url: str) -> BaseURL:
        """Raise ValueError for anything but http(s)://host[:port][/path]."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {redact_url(url)!r}")
        port = parts.port  # raises ValueError for a port that is not a number in range
        path = parts.path.rstrip("/") + (f"?{parts.query}" if parts.query else "")
        user = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        return BaseURL(parts.scheme, parts.hostname, port, path, user, password)

    @property
    def default_port(self) -> int:
        return 443 if self.scheme == "https" else 80

    @property
    def host_header(self) -> str:
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return self.hostname, self.port or self.default_port

    @property
    def clean(self) -> str:
        """The URL without credentials: what requests are sent to."""
        return f"{self.scheme}://{self.host_header}{self.path}"

    @property
    def has_credentials(self) -> bool:
        return self.username is not None

    def basic_auth(self) -> str | None:
        """The `Authorization` value for the URL's credentials, or None."""
        if self.username is None:
            return None
        raw = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def secrets(self) -> list[str]:
        out = [s for s in (self.password, self.username) if s]
        auth = self.basic_auth()
        if auth:
            out.append(auth.split(" ", 1)[1])
        return out


def auth_headers(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(URL without credentials, headers with `Authorization: Basic` for them unless one is set)."""
    parsed = BaseURL.parse(url)
    if not parsed.has_credentials:
        return url, headers
    if any(k.lower() == "authorization" for k in headers):
        return parsed.clean, headers
    return parsed.clean, {**headers, "Authorization": parsed.basic_auth() or ""}
