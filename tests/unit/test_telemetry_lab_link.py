"""The lab link's counters over time and the engine's own token counters per slice: read from a
hand-made sysfs tree, sampled by the Sampler, turned into the slice table's columns."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from kvbench.engines.adapters import get_adapter
from kvbench.engines.telemetry import Scraper
from kvbench.report.slices.frame import PhaseSpan, Sizes, build_slices, telemetry_columns, transfer_columns
from kvbench.report.slices.section import slices_table
from kvbench.report.slices.series import series
from kvbench.results import read_jsonl
from kvbench.telemetry.lab_link import read_link
from kvbench.telemetry.sampler import TELEMETRY, Sampler, build_sampler, link_source

S = 1_000_000_000


def fake_sysfs(root: Path, dev: str, **stats: int) -> None:
    d = root / dev / "statistics"
    d.mkdir(parents=True, exist_ok=True)
    for name, value in stats.items():
        (d / name).write_text(f"{value}\n")


def test_read_link_names_each_counter_by_device_and_skips_what_is_missing(tmp_path: Path) -> None:
    fake_sysfs(tmp_path, "kvlab-h", rx_bytes=1234, tx_bytes=99, rx_packets=7)
    (tmp_path / "kvlab-h" / "statistics" / "tx_packets").write_text("garbage")
    got = read_link(["kvlab-h", "gone0"], root=tmp_path)
    dev = (("device", "kvlab-h"),)
    assert got == {
        ("kvbench_lab_link_receive_bytes_total", dev): 1234.0,
        ("kvbench_lab_link_transmit_bytes_total", dev): 99.0,
        ("kvbench_lab_link_receive_packets_total", dev): 7.0,
    }
    assert read_link(["gone0"], root=tmp_path) == {}


def test_the_lab_link_is_sampled_only_with_host_telemetry_and_a_lab_target(tmp_path: Path) -> None:
    engine = Scraper(http=None, writer=None, origin_ns=0, enabled=False)  # type: ignore[arg-type]
    on = SimpleNamespace(interval_s=0.2, exporters=[], host=True)
    off = SimpleNamespace(interval_s=0.2, exporters=[], host=False)
    kinds = lambda s: [src.kind for src in s.sources]  # noqa: E731
    assert kinds(build_sampler(engine, on, tmp_path, print)) == ["host"]
    assert kinds(build_sampler(engine, on, tmp_path, print, ("kvlab-h",))) == ["host", "link"]
    assert kinds(build_sampler(engine, off, tmp_path, print, ("kvlab-h",))) == []


async def test_the_sampler_writes_link_rows_over_time_and_one_error_row_per_failed_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvbench.telemetry.lab_link as lab_link

    sysfs = tmp_path / "sys"
    fake_sysfs(sysfs, "kvlab-h", rx_bytes=0, tx_bytes=0)
    monkeypatch.setattr(lab_link, "SYS_NET", sysfs)
    engine = Scraper(http=None, writer=None, origin_ns=time.perf_counter_ns(), enabled=False)  # type: ignore[arg-type]
    warned: list[str] = []
    sampler = Sampler(engine, [link_source(["kvlab-h"]), link_source(["gone0"])], tmp_path, warned.append)
    async with sampler.during("cached", 0.1):
        for i in range(1, 6):  # the link carries 1 MB more every 0.1 s
            await asyncio.sleep(0.1)
            fake_sysfs(sysfs, "kvlab-h", rx_bytes=i * 10**6, tx_bytes=i * 1000)
    rows = read_jsonl(tmp_path / TELEMETRY)
    rx = [r for r in rows if r.get("name") == "kvbench_lab_link_receive_bytes_total"]
    assert len(rx) >= 3 and all(r["kind"] == "link" and r["labels"] == {"device": "kvlab-h"} for r in rx)
    values = [r["value"] for r in sorted(rx, key=lambda r: r["t_ns"])]
    assert values == sorted(values) and values[-1] > values[0]
    errors = [r for r in rows if r.get("error")]
    assert errors and all("gone0" in r["error"] for r in errors)
    assert len(warned) == 1 and "gone0" in warned[0]


def link_row(t_s: float, name: str, value: float) -> dict:
    return {"t_ns": int(t_s * S), "kind": "link", "source": "lab link kvlab-h", "name": name,
            "labels": {"device": "kvlab-h"}, "value": value}  # fmt: skip


def test_lab_link_gb_s_per_slice_each_way() -> None:
    rows = [
        *(link_row(t, "kvbench_lab_link_receive_bytes_total", b) for t, b in ((0, 0), (1, 2e9), (2, 2.5e9))),
        *(link_row(t, "kvbench_lab_link_transmit_bytes_total", b) for t, b in ((0, 5e8), (2, 9e8))),
    ]
    cols = telemetry_columns(rows, np.array([0.0, 1.0, 2.0]) * S)
    assert cols["lab_link_from_storage_gb_s"] == pytest.approx([2.0, 0.5])
    assert cols["lab_link_to_storage_gb_s"] == pytest.approx([0.2, 0.2])  # 0.4 GB over 2 s
    assert "host_net_rx_gb_s" not in cols  # the link's rows are not the host's


def _req(i: int, sent_s: float) -> dict:
    return {"request_id": f"r{i}", "phase": "cached", "label": "cached", "status": "ok",
            "sent_ns": int(sent_s * S), "first_token_ns": int((sent_s + 0.1) * S),
            "end_ns": int((sent_s + 0.2) * S), "ttft_ms": 100.0, "cached_tokens": 0,
            "prompt_tokens": 100}  # fmt: skip


def _metric(t_s: float, name: str, value: float) -> dict:
    return {"t_ns": int(t_s * S), "phase": "cached", "name": name, "labels": {}, "value": value}


def test_llamacpp_slices_read_prompt_tokens_and_a_hit_ratio_from_its_own_counters() -> None:
    """llama.cpp has no queried-tokens counter: queried = cached + computed, its two source counters."""
    metrics = [
        *(_metric(t, "llamacpp:prompt_tokens_cached_total", v) for t, v in ((0, 0), (1, 300), (2, 1800))),
        *(_metric(t, "llamacpp:prompt_tokens_total", v) for t, v in ((0, 0), (1, 700), (2, 1200))),
    ]
    sl = build_slices(pd.DataFrame([_req(0, 0.1), _req(1, 1.1)]), metrics, [], [],
                      [PhaseSpan("cached", 0, 2 * S)], get_adapter("llamacpp"), slice_s=1.0)  # fmt: skip
    assert sl["server_prompt_tokens_per_s"].tolist() == pytest.approx([1000.0, 2000.0])
    assert sl["server_cached_tokens_per_s"].tolist() == pytest.approx([300.0, 1500.0])
    assert sl["hit_ratio"].tolist() == pytest.approx([0.3, 0.75])
    table = slices_table(sl)
    assert "prompt tok/s (server)" in table.headers and "hit ratio (server)" in table.headers
    col = table.headers.index("prompt tok/s (server)")
    assert [row[col] for row in table.rows] != ["-", "-"]


def test_vllm_offload_bytes_counted_once_under_its_new_and_deprecated_names() -> None:
    """vLLM 0.32's CPU offloading counts the same bytes in kv_offload_load_bytes and in the deprecated
    kv_offload_total_bytes{transfer_type}: the slice counts them once; an older vLLM, deprecated only."""
    adapter = get_adapter("vllm")
    edges = np.array([0.0, 1.0]) * S

    def rows(*names: tuple[str, dict]) -> list[dict]:
        return [{"t_ns": t * S, "name": n, "labels": lab, "value": v * 1e9}
                for n, lab in names for t, v in ((0, 0), (1, 3))]  # fmt: skip

    new = ("vllm:kv_offload_load_bytes_total", {})
    old = ("vllm:kv_offload_total_bytes_total", {"transfer_type": "CPU_to_GPU"})
    both = transfer_columns(series(rows(new, old)), adapter.transfer_counters, edges, Sizes())
    assert both["onboard_G2_gb_s"] == pytest.approx([3.0])
    older = transfer_columns(series(rows(old)), adapter.transfer_counters, edges, Sizes())
    assert older["onboard_G2_gb_s"] == pytest.approx([3.0]) and "offload_G2_gb_s" not in older
    tiering = ("vllm:kv_offload_tiering_read_bytes_total", {"tier": "1:fs"})
    tiered = transfer_columns(series(rows(tiering)), adapter.transfer_counters, edges, Sizes())
    assert tiered == {"onboard_1:fs_gb_s": pytest.approx([3.0])}


def test_lab_link_interfaces_only_for_a_lab_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbench.lab.config import VETH_HOST, EngineInfo, LabConfig, LabState, LinkShape, save_state
    from kvbench.lab.manifest import lab_link_interfaces

    monkeypatch.setenv("KVBENCH_LAB_DIR", str(tmp_path))
    assert lab_link_interfaces("http://127.0.0.1:8471") == ()  # no lab
    cfg = LabConfig()
    shape = LinkShape(rate_mbit=400, delay_ms=None, qdisc="tbf", host_addr=cfg.host_addr, ns_addr=cfg.ns_addr)
    eng = EngineInfo(name="a", url="http://127.0.0.1:8471", raw_url="http://127.0.0.1:8481",
                     server_pid=1, connector_pid=2, log="x")  # fmt: skip
    save_state(LabState(config=cfg, started_at="t", step="ready", link=shape, engines=[eng]), tmp_path)
    assert lab_link_interfaces("http://127.0.0.1:8471") == (VETH_HOST,)
    assert lab_link_interfaces("http://10.0.0.1:8000", None) == ()
