"""The tcp noise generator end to end against in-process sinks: its totals against what the sink
counted, the declared rate a sender sends to a modelled sink, the refusal when no sink listens,
`kvbench noise tcp | sink` from the CLI, and the Ray actor's local half (NoiseClient) without Ray."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kvbench.errors import UsageError
from kvbench.noise import commands
from kvbench.noise.backend import NoiseContext
from kvbench.noise.remote import NoiseClient, RemoteConfig
from kvbench.noise.sink import tcp_sink
from kvbench.noise.tcp import MODEL_CONFIRM_BYTES_PER_S, TcpNoiseBackend
from kvbench.scenario.noise import TcpNoise


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


async def _caught_up(sink: Any, total: int) -> None:
    """Bytes a sender counted as sent may still be in flight to the sink: wait (bounded) for them."""
    for _ in range(500):
        if sink.bytes_received >= total:
            return
        await asyncio.sleep(0.02)


async def test_the_senders_total_is_what_the_sink_received() -> None:
    rows = _Rows()
    async with tcp_sink() as sink:
        cfg = TcpNoise(targets=[sink.address], senders=2, rate_bytes_per_s=2e6, max_duration_s=60)
        backend = TcpNoiseBackend(cfg, NoiseContext(phase="noisy-1", writer=rows, origin_ns=0))
        async with backend as handle:
            await asyncio.sleep(0.3)
        await _caught_up(sink, handle.total_bytes)
        received = sink.bytes_received
    assert handle.total_bytes == received > 0
    assert [c["client"] for c in handle.clients] == ["tcp-0", "tcp-1"]
    assert all(c["target"] == sink.address and c["error"] is None for c in handle.clients)
    assert sum(c["bytes"] for c in handle.clients) == handle.total_bytes
    assert handle.target_bytes_per_s == 2e6 and not handle.active
    # the rows of each client add up to its total, and the total rows to the sum
    for c in handle.clients:
        assert sum(r["bytes"] for r in rows.rows if r["client"] == c["client"]) == c["bytes"]
    assert sum(r["bytes"] for r in rows.rows if r["client"] == "total") == handle.total_bytes
    assert {r["phase"] for r in rows.rows} == {"noisy-1"}


async def test_a_modelled_sink_gets_each_senders_declared_share() -> None:
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readline())
        while await reader.read(1 << 16):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    cfg = TcpNoise(senders=2, rate_bytes_per_s=8e6, max_duration_s=60)
    ctx = NoiseContext(phase="noisy-1", writer=None, origin_ns=0, default_targets=(address,))
    backend = TcpNoiseBackend(cfg, ctx)
    assert backend.modelled
    # the real bytes aim at the confirming rate per sender, not the modelled 4e6 each
    assert backend.handle.target_bytes_per_s == 2 * min(4e6, MODEL_CONFIRM_BYTES_PER_S)
    async with backend:
        await asyncio.sleep(0.2)
    server.close()
    await server.wait_closed()
    assert heads == [b"KVBNOISE 4000000.0\n"] * 2
    # named targets are not the model: nothing is declared there
    assert not TcpNoiseBackend(TcpNoise(targets=[address]), ctx).modelled


async def test_no_sink_listening_refuses_to_start_naming_the_target() -> None:
    port = _free_port()
    cfg = TcpNoise(targets=[f"127.0.0.1:{port}"], senders=2, max_duration_s=60)
    backend = TcpNoiseBackend(cfg, NoiseContext(phase="p", writer=None, origin_ns=0))
    with pytest.raises(UsageError) as exc:
        await backend.start()
    assert exc.value.message.startswith(f"noise.targets: cannot stream to the tcp sink 127.0.0.1:{port}: ")
    assert all(p.returncode is not None for p in backend.procs)  # nothing left running


# --- the CLI ------------------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()
    commands.register(app)
    return app


class _ThreadSink:
    """A sink on a thread, for the CLI (which runs its own event loop)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.received = 0
        self.stopping = False
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._read, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _read(self, conn: socket.socket) -> None:
        with conn:
            while chunk := conn.recv(1 << 16):
                with self.lock:
                    self.received += len(chunk)

    def close(self) -> None:
        self.stopping = True
        for t in self.threads:
            t.join(timeout=30)
        self.server.close()


def test_noise_tcp_prints_rows_then_a_summary_that_matches_the_sink() -> None:
    sink = _ThreadSink()
    try:
        got = CliRunner().invoke(
            _app(),
            ["noise", "tcp", "-t", sink.address, "--senders", "1", "--rate", "500000", "--duration", "0.5"],
        )
    finally:
        sink.close()
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[0].startswith("t=")
    summary = json.loads(got.output[got.output.index("{") :])
    assert summary["kind"] == "tcp" and summary["total_bytes"] == sink.received > 0
    assert summary["target_bytes_per_s"] == 500000.0
    assert [c["target"] for c in summary["clients"]] == [sink.address]


def test_noise_sink_counts_what_a_client_sends() -> None:
    port = _free_port()
    payload = b"x" * 12_345

    def client() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(payload)
                    return
            except OSError:
                time.sleep(0.02)

    t = threading.Thread(target=client, daemon=True)
    t.start()
    got = CliRunner().invoke(_app(), ["noise", "sink", "--port", str(port), "--duration", "2"])
    t.join(timeout=30)
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[0] == f"listening on 127.0.0.1:{port}"
    assert lines[-1].startswith("received 12,345 bytes in ")
    assert any("total=12,345 B" in line for line in lines[1:-1])


# --- the Ray actor's local half -------------------------------------------------------------------


def test_remote_config_gives_attributes_and_its_dict_back() -> None:
    data = {"kind": "tcp", "targets": ["h:1"], "senders": 2}
    cfg = RemoteConfig(data)
    assert (cfg.kind, cfg.targets, cfg.senders) == ("tcp", ["h:1"], 2)  # type: ignore[attr-defined]
    dumped = cfg.model_dump()
    dumped["senders"] = 9
    assert cfg.model_dump() == data  # a copy: the handle cannot change the config


async def test_noise_client_runs_a_local_generator_and_keeps_its_rows() -> None:
    client = NoiseClient("c0")
    before = await client.sample()
    assert (before["bytes"], before["active"]) == (0, False)
    assert await client.stop() == {"summary": None, "rows": [], "total_bytes": 0}
    async with tcp_sink() as sink:
        cfg = TcpNoise(
            targets=[sink.address], senders=1, rate_bytes_per_s=1e6, max_duration_s=60
        ).model_dump()
        started = await client.start("tcp", cfg, "noisy-2")
        assert "started_ns" in started, started
        sampled = await client.sample()
        assert sampled["active"] is True and sampled["bytes"] >= 0
        await asyncio.sleep(0.2)
        stopped = await client.stop()
    assert stopped["summary"]["kind"] == "tcp" and stopped["summary"]["config"] == cfg
    assert stopped["total_bytes"] == stopped["summary"]["total_bytes"]
    assert all(r["client"] != "total" and r["phase"] == "noisy-2" for r in stopped["rows"])
    assert client.backend is None  # a second stop is a no-op
    assert (await client.stop())["summary"] is None


async def test_noise_client_reports_expected_failures_as_one_line() -> None:
    client = NoiseClient("c1")
    got = await client.start("tcp", TcpNoise(targets=[f"127.0.0.1:{_free_port()}"]).model_dump(), "p")
    assert got["error"].startswith("noise.targets: cannot stream to the tcp sink")
    assert client.backend is None


async def test_fio_on_a_directory_gets_a_subdirectory_per_client_removed_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))  # no fio: start fails after making the folder
    client = NoiseClient("c2")
    cfg = {"kind": "fio", "path": str(tmp_path), "rw": "read"}
    own = client._own_directory("fio", cfg)
    assert Path(own["path"]).parent == tmp_path and Path(own["path"]).name.startswith("kvbench-noise-c2-")
    assert Path(own["path"]).is_dir() and cfg["path"] == str(tmp_path)
    client._remove_workdir()
    assert list(tmp_path.iterdir()) == []
    assert client._own_directory("tcp", cfg) is cfg
    got = await client.start(
        "fio", {**cfg, "block_size": "1M", "jobs": 1, "size": "1M", "max_duration_s": 5}, "p"
    )
    assert "fio program is not installed" in got["error"]
    assert list(tmp_path.iterdir()) == []  # the failed start removed its folder
