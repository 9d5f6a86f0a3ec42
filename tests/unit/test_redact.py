"""kvbench.redact: the one function every written URL, header and text goes through."""

from __future__ import annotations

import base64
import io
import sys

import pytest

from kvbench import redact as r
from kvbench.baseurl import Redactor as BaseURLRedactor
from kvbench.baseurl import redact_url as baseurl_redact_url


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


@pytest.mark.parametrize(
    "text",
    [
        "http://alice:pw-x9@host:8000/v1",
        "failed: GET https://alice:pw-x9@host/metrics refused",
        f'echo{{auth="Basic {b64("alice:pw-x9")}"}} 1',
        "Authorization: Bearer sk-live-0123abcd",
        "authorization=bearer%20sk-live-0123abcd",
        "api_key=sk-live-0123abcd&model=x",
        '{"password": "hunter22"}',
    ],
)
def test_every_form_of_credential_is_masked(text: str) -> None:
    out = r.redact_text(text)
    for secret in ("pw-x9", b64("alice:pw-x9"), "sk-live-0123abcd", "hunter22"):
        assert secret not in out, out
    assert r.REDACTED in out


@pytest.mark.parametrize(
    "text",
    ["basic delivery of tokens", "first token time 12 ms", "Basic Auth is on", "http://host:8000/v1", "a@b"],
)
def test_ordinary_words_are_kept(text: str) -> None:
    assert r.redact_text(text) == text


def test_remembered_secrets_are_masked_raw_and_in_base64() -> None:
    r.remember("k3y-remembered-77")
    text = f"x k3y-remembered-77 y {b64('k3y-remembered-77')} z"
    assert r.redact_text(text) == f"x {r.REDACTED} y {r.REDACTED} z"


def test_records_keep_their_shape_and_lose_secret_header_values() -> None:
    record = {
        "target": {"base_url": "http://u:pw-rec1@h", "headers": {"Authorization": "x", "X-Tenant": "t1"}},
        "exporters": [{"url": "http://v:pw-rec2@n:9100/metrics", "kind": "node"}],
        "n": 3,
    }
    out = r.redact(record)
    assert out["target"]["base_url"] == "http://<redacted>@h"
    assert out["target"]["headers"] == {"Authorization": r.REDACTED, "X-Tenant": "t1"}
    assert out["exporters"][0] == {"url": "http://<redacted>@n:9100/metrics", "kind": "node"}
    assert out["n"] == 3 and record["n"] == 3 and "pw-rec1" in record["target"]["base_url"]  # a copy


def test_baseurl_and_clients_use_the_one_function() -> None:
    assert baseurl_redact_url is r.redact_url and BaseURLRedactor is r.Redactor
    red = r.Redactor({"X-Key": "hdr-secret-55"}, "http://carol:pw-cl3@h")
    text = f"hdr-secret-55 pw-cl3 {b64('carol:pw-cl3')} Bearer other-tok-123"
    out = red(text)
    assert "hdr-secret-55" not in out and "pw-cl3" not in out and b64("carol:pw-cl3") not in out
    assert "other-tok-123" not in out  # an echoed bearer token nobody configured


def test_a_remembered_user_name_does_not_unmask_a_short_password() -> None:
    # the user name is remembered (4+ characters), the password is too short to be; the URL's
    # userinfo must still go whole, not as `<redacted>:pw@`
    r.remember(*r.secrets_of_url("ftp://someuser:pw@host"))
    assert (
        r.redact_text("--base-url 'ftp://someuser:pw@host': bad") == "--base-url 'ftp://<redacted>@host': bad"
    )


def _stream(encoding: str = "utf-8") -> tuple[io.BytesIO, r.RedactingStream]:
    raw = io.BytesIO()
    return raw, r.RedactingStream(io.TextIOWrapper(raw, encoding=encoding, write_through=False))


def test_bytes_written_to_the_buffer_are_redacted_and_keep_their_order() -> None:
    r.remember("sPlit-secret-42")
    raw, out = _stream()
    out.write("text first, ")
    out.buffer.write(b"then Bearer sk-LIVE0123abcd\n")
    out.buffer.write(b"a sPlit-")  # a remembered secret in two binary writes is still one string
    out.buffer.write(bytearray(b"secret-42 and bytes that are not UTF-8: \xff\xfe\n"))
    out.write("text again\n")
    out.flush()
    assert raw.getvalue() == (
        b"text first, then Bearer <redacted>\n"
        b"a <redacted> and bytes that are not UTF-8: \xff\xfe\n"
        b"text again\n"
    )
    with pytest.raises(TypeError):
        out.buffer.write("text")  # type: ignore[arg-type]


def test_a_stream_without_a_buffer_shows_none() -> None:
    out = r.RedactingStream(io.StringIO())
    assert getattr(out, "buffer", None) is None and not hasattr(out, "buffer")


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_click_output_through_the_buffer_is_redacted(monkeypatch: pytest.MonkeyPatch, encoding: str) -> None:
    # click writes bytes to stdout's buffer, and rewraps a stream it finds misconfigured (ascii)
    # around that buffer: both routes skipped the masking while `.buffer` was the real one
    import click

    raw, out = _stream(encoding)
    monkeypatch.setattr(sys, "stdout", out)
    click.echo(b"bytes: http://user:pw-in-bytes@host/x")
    click.echo("text: Authorization: Basic dXNlcjpwYXNzd29yZA==")
    out.flush()
    text = raw.getvalue().decode()
    assert "pw-in-bytes" not in text and "dXNlcjpwYXNzd29yZA" not in text
    assert text == "bytes: http://<redacted>@host/x\ntext: Authorization: Basic <redacted>\n"
