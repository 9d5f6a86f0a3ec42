"""The tcp noise sender run in this process (so that its lines count): its protocol on stdout
(`connected`, byte counts, `error ...`), `go` and EOF on stdin, the declared-rate header, and that
the count it prints is what the sink received, against a sink thread that keeps what it reads."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kvbench.noise import sender


class _Sink:
    """A one-connection TCP sink on a thread: counts what it reads, keeps the first bytes."""

    def __init__(self, close_after: int | None = None) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received = 0
        self.head = b""
        self.close_after = close_after
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(60)
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            while chunk := conn.recv(1 << 16):
                if len(self.head) < 64:
                    self.head += chunk[: 64 - len(self.head)]
                self.received += len(chunk)
                if self.close_after is not None and self.received >= self.close_after:
                    # reset, not FIN: the sender's next sends fail at once
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    return

    def wait(self) -> None:
        self.thread.join(timeout=60)
        self.server.close()


class _Stdin:
    """sys.stdin as the sender sees it: only its file descriptor is read."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


class _Out:
    """What the sender printed (pytest's capture holds its stdout)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().out


@pytest.fixture
def stdio(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[_Out, Any]]:
    """The sender's stdout and a writer for its stdin (a pipe); SIGINT restored after."""
    read_fd, write_fd = os.pipe()
    out = _Out(capsys)
    monkeypatch.setattr(sys, "stdin", _Stdin(read_fd))
    previous = signal.getsignal(signal.SIGINT)

    def feed(data: bytes | None) -> None:
        if data:
            os.write(write_fd, data)
        else:
            os.close(write_fd)

    yield out, feed
    signal.signal(signal.SIGINT, previous)
    os.close(read_fd)
    with contextlib.suppress(OSError):  # closed already by a test that sent EOF
        os.close(write_fd)


def _lines(out: _Out) -> list[str]:
    return out.getvalue().split()


def test_refused_connection_is_an_error_line_and_exit_1(stdio: tuple[_Out, Any]) -> None:
    out, _feed = stdio
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed below: nothing listens there
    assert sender.main(["127.0.0.1", str(port)]) == 1
    assert out.getvalue().startswith("error ")


def test_eof_before_go_sends_nothing(stdio: tuple[_Out, Any]) -> None:
    out, feed = stdio
    sink = _Sink()
    feed(None)
    assert sender.main(["127.0.0.1", str(sink.port), "--max-duration", "30"]) == 0
    sink.wait()
    assert _lines(out) == ["connected", "0"]
    assert sink.received == 0


def test_after_go_the_last_count_is_what_the_sink_received(stdio: tuple[_Out, Any]) -> None:
    out, feed = stdio
    sink = _Sink()
    feed(b"go\n")
    rate = 400_000.0
    argv = ["127.0.0.1", str(sink.port), "--rate", repr(rate), "--max-duration", "0.6", "--declare", "5e6"]
    assert sender.main(argv) == 0
    sink.wait()
    lines = _lines(out)
    assert lines[0] == "connected"
    counts = [int(x) for x in lines[1:]]
    assert counts == sorted(counts)  # cumulative
    header = b"KVBNOISE 5000000.0\n"
    assert sink.head.startswith(header)
    assert sink.received - len(header) == counts[-1] > 0
    # rate-limited: chunks of rate * SENDER_REPORT_S and a bucket of two of them, so never more
    # than the bucket plus the rate times the whole run (generous: the run is at most its deadline)
    chunk = min(262_144, max(4096, int(rate * sender.SENDER_REPORT_S)))
    assert counts[-1] <= 2 * chunk + rate * 0.6 + chunk


class _Recorded:
    """A connected socket whose `send` calls are recorded (a socket's own methods cannot be patched)."""

    def __init__(self, sock: socket.socket, sizes: list[int]) -> None:
        self.sock, self.sizes = sock, sizes

    def send(self, data: Any) -> int:
        self.sizes.append(len(data))
        return self.sock.send(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@pytest.mark.parametrize("rate", ["0", "400000"])
def test_chunk_bytes_caps_every_send_with_or_without_a_rate(
    stdio: tuple[_Out, Any], monkeypatch: pytest.MonkeyPatch, rate: str
) -> None:
    # --chunk-bytes 512 with a rate whose interval's worth is 20 kB: each send is 512 bytes at most
    # (it was raised to a 4 KiB floor), and the sink still gets every byte counted
    out, feed = stdio
    sink = _Sink()
    sizes: list[int] = []
    real = socket.create_connection
    monkeypatch.setattr(sender.socket, "create_connection", lambda *a, **k: _Recorded(real(*a, **k), sizes))
    feed(b"go\n")
    argv = ["127.0.0.1", str(sink.port), "--chunk-bytes", "512", "--rate", rate, "--max-duration", "0.3"]
    assert sender.main(argv) == 0
    sink.wait()
    assert sizes and max(sizes) == 512
    assert sink.received == int(_lines(out)[-1])


def test_a_line_other_than_go_stops_before_sending(stdio: tuple[_Out, Any]) -> None:
    out, feed = stdio
    sink = _Sink()
    feed(b"stop\n")
    assert sender.main(["127.0.0.1", str(sink.port)]) == 0
    sink.wait()
    assert _lines(out) == ["connected", "0"]


def test_a_sink_that_goes_away_is_an_error_and_exit_1(stdio: tuple[_Out, Any]) -> None:
    out, feed = stdio
    sink = _Sink(close_after=1)
    feed(b"go\n")
    assert sender.main(["127.0.0.1", str(sink.port), "--max-duration", "30"]) == 1
    sink.wait()
    text = out.getvalue()
    assert "error the sink closed the connection" in text
    assert int(text.split()[-1]) >= 1  # the count so far still ends the output


@pytest.mark.parametrize("flag", ["--chunk-bytes", "--max-duration"])
def test_non_positive_sizes_are_refused_by_the_parser(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sender.main(["127.0.0.1", "9", flag, "0"])
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err
