"""The client's pure rules: base URLs, credentials, redaction, error messages, response heads, delivery."""

from __future__ import annotations

import json

import pytest

from kvbench.baseurl import BaseURL, Redactor, auth_headers, redact_url
from kvbench.client import ClientConfig, RequestRecord, ResponseStream, burst_warning, is_burst
from kvbench.client.delivery import judge
from kvbench.client.detail import error_detail
from kvbench.run.preflight.target import TargetInfo, request_headers
from kvbench.scenario import load_scenario, scenario_to_yaml

NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n"
)


@pytest.mark.parametrize(
    ("url", "host", "address", "clean"),
    [
        ("http://u:p@h.example:8000", "h.example:8000", ("h.example", 8000), "http://h.example:8000"),
        ("https://u@h.example/base", "h.example", ("h.example", 443), "https://h.example/base"),
        ("http://[::1]:9/x/", "[::1]:9", ("::1", 9), "http://[::1]:9/x"),
        ("http://h", "h", ("h", 80), "http://h"),
    ],
)
def test_base_url_host_is_hostname_and_port(url, host, address, clean):
    parsed = BaseURL.parse(url)
    assert (parsed.host_header, parsed.address, parsed.clean) == (host, address, clean)


@pytest.mark.parametrize("url", ["http://h:99999", "http://h:abc", "ftp://h", "http://"])
def test_bad_urls_raise_value_error(url):
    with pytest.raises(ValueError):
        BaseURL.parse(url)


def test_credentials_become_basic_auth_unless_an_authorization_is_set():
    url, headers = auth_headers("http://us%3Aer:pw@h:1", {"X-A": "1"})
    assert url == "http://h:1" and headers == {"X-A": "1", "Authorization": "Basic dXM6ZXI6cHc="}
    assert auth_headers("http://h:1", {}) == ("http://h:1", {})
    assert auth_headers("http://u:p@h:1", {"authorization": "Bearer k"})[1] == {"authorization": "Bearer k"}


def test_redact_url_hides_userinfo_only():
    assert redact_url("http://u:p@h:1/v?q=a@b") == "http://<redacted>@h:1/v?q=a@b"
    assert redact_url("http://h:1/a@b") == "http://h:1/a@b"
    assert redact_url(None) is None


def test_redactor_replaces_keys_tokens_and_url_credentials():
    red = Redactor({"Authorization": "Bearer sk-abcdef", "X-Flag": "1"}, "http://me:hunter22@h")
    text = red("key sk-abcdef, header Bearer sk-abcdef, pw hunter22, basic bWU6aHVudGVyMjI=, flag 1")
    assert text == "key <redacted>, header <redacted>, pw <redacted>, basic <redacted>, flag 1"


def test_html_error_pages_become_their_title_or_first_words():
    assert error_detail(NGINX_502) == "502 Bad Gateway"
    assert (
        error_detail("<html><body><p>Request   Entity\nToo Large</p></body></html>")
        == "Request Entity Too Large"
    )
    assert error_detail('{"error": {"message": "busy"}}') == "busy"
    assert error_detail('{"detail": "Not Found"}') == "Not Found"
    assert error_detail("plain\ntext") == "plain text"


def stream() -> tuple[RequestRecord, ResponseStream]:
    rec = RequestRecord("r")
    return rec, ResponseStream(rec, ClientConfig(base_url="http://x", model="m"))


def test_a_redirect_names_its_target():
    rec, s = stream()
    assert s.head(5, 308, "Permanent Redirect", {"location": "https://x/v1/completions"})
    assert rec.error_type == "http_308"
    assert rec.error_message == "redirected to https://x/v1/completions: use that URL"


def test_an_html_error_body_is_reduced_to_text():
    rec, s = stream()
    assert not s.head(5, 502, "Bad Gateway", {"content-type": "text/html"})
    s.feed(6, NGINX_502.encode())
    s.end(7)
    assert (rec.error_type, rec.error_message) == ("http_502", "502 Bad Gateway")


def test_compressed_stream_never_reaches_the_parser():
    rec, s = stream()
    assert s.head(5, 200, "OK", {"content-type": "text/event-stream", "content-encoding": "gzip"})
    assert rec.error_type == "compressed"


def test_json_answer_is_not_streamed_or_a_server_error():
    rec, s = stream()
    s.head(5, 200, "OK", {"content-type": "application/json"})
    s.feed(6, json.dumps({"choices": [{"text": "hi"}]}).encode())
    s.end(7)
    assert rec.error_type == "not_streamed" and "stream: true" in rec.error_message
    rec, s = stream()
    s.head(5, 200, "OK", {"content-type": "application/json; charset=utf-8"})
    s.feed(6, b'{"error": {"message": "model not loaded"}}')
    s.end(7)
    assert (rec.error_type, rec.error_message) == ("server_error", "model not loaded")


def test_done_ends_the_record_at_the_done_event():
    rec, s = stream()
    s.head(1, 200, "OK", {"content-type": "text/event-stream"})
    assert not s.feed(2, b'data: {"choices":[{"text":"a"}]}\n\n')
    assert s.feed(9, b"data: [DONE]\n\ndata: ignored\n\n")
    assert s.done and rec.ok and rec.end_ns == 9


def rec_with(
    headers: int, tokens: list[int], ok: bool = True, first_read: int = 1, sent: int = 0
) -> RequestRecord:
    rec = RequestRecord(
        "r", sent_ns=sent, headers_ns=headers, token_ns=tokens, first_token_ns=tokens[0] if tokens else None
    )
    rec.first_read_tokens = first_read if tokens else 0
    if not ok:
        rec.fail("x", "y")
    rec.burst = is_burst(rec)
    rec.delivery = judge(rec)
    return rec


def test_burst_flag_and_phase_warning():
    burst = rec_with(1_000_000, [1_000_100, 1_000_900])
    spread = rec_with(1_000_000, [1_000_100, 9_000_000])
    single = rec_with(1_000_000, [9_000_100])  # one token, head sent early: nothing to tell
    assert burst.burst and not spread.burst and not single.burst
    assert (burst.delivery, spread.delivery, single.delivery) == ("burst", None, None)
    warning = burst_warning([burst, burst, burst, spread, single])  # one token: not counted
    assert warning and "one burst" in warning and "3 of 4" in warning and "delivery-bound" in warning
    assert "proxy_buffering off" in warning and "X-Accel-Buffering: no" in warning
    assert "option http-no-delay" in warning
    assert burst_warning([burst, burst, spread, spread, single]) is None  # half is not most
    assert burst_warning([rec_with(0, [1, 2], ok=False)]) is None


MS = 1_000_000


def test_a_first_read_that_held_later_tokens_is_batched_when_they_stand_for_real_time():
    """HAProxy's default: head and 17 tokens of a 10 ms/token answer in one read at +190 ms."""
    tokens = [190 * MS] * 17 + [190 * MS + i * 10 * MS for i in range(1, 48)]
    haproxy = rec_with(190 * MS, tokens, first_read=17)
    assert haproxy.delivery == "batched" and not haproxy.burst
    # the same shape, but the server wrote its tokens 20 us apart: the merge costs < 1 ms, not flagged
    fast = rec_with(1 * MS, [30 * MS + i * 20_000 for i in range(16)], first_read=3)
    assert fast.delivery is None
    # a read that held 2 tokens of a 10 ms pace on a 2 s TTFT: 10 ms is under 10% of it
    slow_prefill = rec_with(
        1 * MS, [2000 * MS, 2000 * MS] + [2000 * MS + i * 10 * MS for i in range(1, 9)], first_read=2
    )
    assert slow_prefill.delivery is None
    warning = burst_warning([haproxy] * 19 + [fast])
    assert warning and "first read already held later tokens (19 of 20 answers; median 17 tokens)" in warning


def test_a_first_read_that_held_the_whole_answer_after_the_head_is_batched():
    """A TTFT test's 16-token answer held whole by a proxy, its head passed on at once: no pace to
    see, and TTFT reads as the last token's. A head that came with it is the burst rule's."""
    whole = rec_with(1 * MS, [120 * MS] * 16, first_read=16)
    assert whole.delivery == "batched" and not whole.burst
    assert "first read already held later tokens" in (burst_warning([whole] * 3) or "")
    with_head = rec_with(120 * MS, [120 * MS] * 16, first_read=16)
    assert with_head.delivery == "burst"


def test_a_head_that_comes_with_the_first_token_alone_is_not_delivery_bound():
    """nginx with proxy_buffering off holds the head until the first token, which is on time."""
    held = rec_with(150 * MS, [150 * MS + 200_000 + i * 10 * MS for i in range(8)])
    assert held.delivery is None and burst_warning([held, held, held]) is None


def test_the_stream_counts_the_tokens_of_the_first_read():
    rec, s = stream()
    s.head(1, 200, "OK", {"content-type": "text/event-stream"})
    s.feed(2, b'data: {"choices":[{"text":""}]}\n\n')  # no content: not the first token
    s.feed(3, b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\n')
    s.feed(4, b'data: {"choices":[{"text":"c"}]}\n\n')
    s.close()
    assert rec.first_token_ns == 3 and rec.first_read_tokens == 2 and rec.token_ns == [3, 3, 4]
    assert rec.to_row()["first_read_tokens"] == 2 and "delivery" in rec.to_row()


def test_scenario_yaml_and_manifest_never_show_url_credentials(monkeypatch):
    scn, _ = load_scenario(
        "ttft", {"target.base_url": "http://u:pw-1234@h:8000", "target.headers": {"X-K": "v"}}
    )
    for redact in (True, False):
        text = scenario_to_yaml(scn, redact=redact)
        assert "pw-1234" not in text and "http://<redacted>@h:8000" in text
    info = TargetInfo("server", "http://u:pw-1234@h:8000", "m", "vllm", "completions", header_names=["X-K"])
    assert info.manifest()["base_url"] == "http://<redacted>@h:8000"
    assert scn.target.transport == "auto" and scn.target.timeouts.idle_s == 60.0


def test_url_credentials_and_an_api_key_cannot_both_be_sent(monkeypatch):
    from kvbench.errors import UsageError

    monkeypatch.setenv("KV_KEY", "sk-1")
    scn, _ = load_scenario("ttft", {"target.base_url": "http://u:p@h:8000", "target.api_key_env": "KV_KEY"})
    with pytest.raises(UsageError, match="cannot both be sent"):
        request_headers(scn, None)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"error": {"message": "bad prompt", "code": 400}}, "bad prompt"),  # OpenAI, nested
        ({"object": "error", "message": "bad prompt", "type": "BadRequestError"}, "bad prompt"),  # vLLM, flat
        ({"error": "bad prompt", "error_type": "validation"}, "bad prompt"),  # TGI
        ({"choices": [{"text": "x"}]}, None),
        ({"object": "text_completion", "choices": []}, None),
    ],
)
def test_stream_error_knows_every_error_shape(obj, message):
    from kvbench.client.detail import stream_error

    assert stream_error(obj) == message


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (502, NGINX_502, "HTTP 502 (502 Bad Gateway): the server, or the one behind this proxy, is down"),
        (404, {"detail": "Not Found"}, "HTTP 404 (Not Found): no OpenAI-style API at this URL"),
        (200, {"object": "list", "data": []}, "HTTP 200 without models; name one with --model"),
        (403, "<html><title>Forbidden</title></html>", "HTTP 403 (Forbidden)"),
    ],
)
def test_models_answer_says_what_the_page_said(status, body, said):
    from kvbench.run.preflight.target import _models_answer

    assert _models_answer(status, body).startswith(said)
