"""The untimed calls (models, version, tokenize, reset, metrics) and the run's aiohttp session.

Untimed calls must see the server exactly as the timed requests do, so they follow the same
rules: credentials in the base URL become `Authorization: Basic` (the URL sent has none), a
redirect is not followed but reported (the timed transport does not follow one either), and
any configured secret a server echoes in a body is replaced by `<redacted>` before a caller
can print it. Unlike the timed requests, these may arrive compressed: aiohttp decodes gzip
and deflate for them.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from kvbench.baseurl import Redactor, auth_headers
from kvbench.client.transport.aiohttp import head_limits


class ControlClient:
    """Small JSON helper over the run's session, for everything that is not a timed request."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], timeout_s: float = 30.0
    ) -> None:
        self.session = session
        self.user_headers = dict(headers)
        self.timeout_s = timeout_s
        self.base_url = base_url

    @property
    def base_url(self) -> str:
        """The server root without credentials (safe to print)."""
        return self._base_url

    @base_url.setter
    def base_url(self, url: str) -> None:
        self._base_url, self.headers = auth_headers(url, self.user_headers)
        self._redact = Redactor(self.user_headers, url)

    def redact(self, text: str) -> str:
        return self._redact(text)

    def _call(self, method: str, path: str, json_body: Any = None) -> Any:
        return self.session.request(
            method,
            self._base_url + path,
            json=json_body,
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            allow_redirects=False,
        )

    async def request(self, method: str, path: str, json_body: Any = None) -> tuple[int, Any]:
        """(status, JSON body, or the text when it is not JSON). A 3xx's body is its Location."""
        async with self._call(method, path, json_body) as resp:
            if 300 <= resp.status < 400:
                return resp.status, f"redirected to {resp.headers.get('Location', '?')}: use that URL"
            text = self.redact(await resp.text(errors="replace"))
            try:
                body: Any = json.loads(text) if text else None
            except ValueError:
                body = text
            return resp.status, body

    async def post_bytes(self, path: str, json_body: Any) -> tuple[int, bytes]:
        async with self._call("POST", path, json_body) as resp:
            return resp.status, await resp.read()

    async def get_text(self, path: str) -> tuple[int, str]:
        async with self._call("GET", path) as resp:
            return resp.status, self.redact(await resp.text(errors="replace"))


def make_session(concurrency: int, connect_timeout_s: float) -> aiohttp.ClientSession:
    """The run's session for untimed calls; its limits also size the timed transport's pool."""
    limit = max(concurrency, 1) + 4
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, connect=None, sock_read=None)
    # the timed transports' head limits: one server, one view of what it may send
    return aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=2**18, **head_limits())
