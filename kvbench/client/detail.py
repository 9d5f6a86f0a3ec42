"""One short line from an error response body: the OpenAI error message, an HTML page's title, or text.

Proxies answer errors with HTML pages (nginx: `<html><head><title>502 Bad Gateway</title>...`);
the useful part is the title, or the first words of the text when there is none. Used for
timed and untimed calls alike. `stream_error` knows the error shapes servers put in a stream or
a JSON answer: OpenAI's nested `{"error": {"message": ...}}`, vLLM's flat
`{"object": "error", "message": ...}` and TGI's `{"error": "text"}`.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_HEADING = re.compile(r"<h1[^>]*>(.*?)</h1>", re.IGNORECASE | re.DOTALL)
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
MAX_DETAIL = 300


def looks_like_html(body: str) -> bool:
    head = body.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html", "<head", "<body", "<h1", "<title")) or "<html" in head


def html_text(body: str, limit: int = 120) -> str:
    """The title of an HTML page, else its first heading, else its first words."""
    for pattern in (_TITLE, _HEADING):
        m = pattern.search(body)
        if m:
            text = _SPACE.sub(" ", html.unescape(_TAG.sub(" ", m.group(1)))).strip()
            if text:
                return text[:limit]
    text = _SPACE.sub(" ", html.unescape(_TAG.sub(" ", _SCRIPT.sub(" ", body)))).strip()
    return text[:limit]


def error_detail(body: str) -> str:
    """The message of an error response body (OpenAI shape, HTML or plain text), one short line."""
    try:
        obj = json.loads(body)
    except ValueError:
        if looks_like_html(body):
            return html_text(body)
        return _SPACE.sub(" ", body).strip()[:MAX_DETAIL]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj))
        if isinstance(err, dict):
            return str(err.get("message") or err)[:MAX_DETAIL]
        return str(err)[:MAX_DETAIL]
    return body.strip()[:MAX_DETAIL]


def stream_error(obj: dict[str, Any]) -> str | None:
    """The message when a decoded event or answer is an error object (any shape above); else None."""
    if obj.get("choices"):
        return None
    if "error" in obj:
        err = obj["error"]
        if isinstance(err, dict):
            return str(err.get("message") or err)[:MAX_DETAIL]
        return str(err)[:MAX_DETAIL] if err else "error"
    if obj.get("object") == "error":
        return str(obj.get("message") or obj.get("detail") or obj)[:MAX_DETAIL]
    return None


def body_detail(body: Any) -> str:
    """error_detail for a body the untimed client already decoded (JSON value or text)."""
    if body is None or (isinstance(body, dict) and not {"error", "detail", "message"} & body.keys()):
        return ""  # nothing that says what went wrong (a 200 list without models, say)
    return error_detail(body if isinstance(body, str) else json.dumps(body))
