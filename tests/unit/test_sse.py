import pytest

from kvbench.client.sse import SSEError, SSEParser, parse_sse

STREAM = (
    b": keep-alive comment\r\n"
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n'
    b"event: message\nid: 7\ndata: line one\ndata: line two\n\n"
    b"data:no-space\r\r"
    b"data: caf\xc3\xa9 \xe2\x82\xac\n\n"
    b"data: [DONE]\n\n"
)


def test_whole_stream_events():
    events = parse_sse([STREAM])
    assert [e.data for e in events] == [
        '{"choices":[{"delta":{"role":"assistant"}}]}',
        "line one\nline two",
        "no-space",
        "café €",
        "[DONE]",
    ]
    assert events[1].id == "7"


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_split_at_every_byte_boundary(cut):
    assert parse_sse([STREAM[:cut], STREAM[cut:]]) == parse_sse([STREAM])


def test_one_byte_at_a_time():
    assert parse_sse([bytes([b]) for b in STREAM]) == parse_sse([STREAM])


def test_unknown_field_is_counted_not_dispatched():
    p = SSEParser()
    assert p.feed(b"garbage line\ndata: x\n\n")[0].data == "x"
    assert p.unknown_lines == 1


def test_unterminated_event_is_not_dispatched():
    p = SSEParser()
    assert p.feed(b"data: partial") == []
    assert p.has_partial


def test_oversized_event_raises():
    p = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        p.feed(b"data: " + b"x" * 200)


def test_invalid_utf8_raises():
    with pytest.raises(SSEError):
        parse_sse([b"data: \xff\xfe\n\n"])
