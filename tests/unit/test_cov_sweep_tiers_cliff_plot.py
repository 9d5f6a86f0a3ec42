"""Tier sizes read from a server (kvbench.sweep.tiers, a local HTTP server answering as llama.cpp's
/props and vLLM's /metrics are documented to) and the tier-cliff map drawn on an Axes it is given."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from kvbench.sweep.plots import draw_cliff, series
from kvbench.sweep.tiers import fetch_answers, reported_capacities

# llama.cpp tools/server README, GET /props: total_slots (-np) and the per-slot context
PROPS = {"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}, "model_path": "m.gguf"}
# vLLM's /metrics info gauge: its labels carry the cache config
METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="1001"} 1.0\n'
)


class _Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = {"/props": json.dumps(PROPS), "/metrics": METRICS}.get(self.path)
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # keep pytest's output clean
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _scn(base_url: str | None, key_env: str | None = None, headers: dict[str, str] | None = None) -> Any:
    return SimpleNamespace(
        target=SimpleNamespace(base_url=base_url, api_key_env=key_env, headers=headers or {})
    )


def test_fetch_answers_keeps_what_answered_and_sends_the_headers(server: str) -> None:
    got = fetch_answers(server + "/", ("/props", "/nope"), {"X-Team": "kv"})
    assert set(got) == {"/props"} and json.loads(got["/props"]) == PROPS
    assert [p for p, _ in _Handler.seen] == ["/props", "/nope"]


def test_fetch_answers_from_nothing_listening_is_empty() -> None:
    assert fetch_answers("http://127.0.0.1:9", ("/props",), {}) == {}


def test_llamacpp_slots_become_g1_sequences_with_the_named_key(monkeypatch, server: str) -> None:
    monkeypatch.setenv("KVB_TEST_TIER_KEY", "k-123")
    (g1,) = reported_capacities(_scn(server, "KVB_TEST_TIER_KEY"), "llamacpp")
    assert (g1.tier, g1.tokens, g1.sequences) == ("G1", 8192, 4)
    assert "total_slots=4, n_ctx=8192" in g1.source
    assert _Handler.seen == [("/props", "Bearer k-123")]


def test_an_unset_key_falls_back_to_the_scenario_headers(monkeypatch, server: str) -> None:
    monkeypatch.delenv("KVB_TEST_TIER_KEY", raising=False)
    caps = reported_capacities(_scn(server, "KVB_TEST_TIER_KEY", {"Authorization": "Bearer h"}), "llamacpp")
    assert [c.sequences for c in caps] == [4]
    assert _Handler.seen == [("/props", "Bearer h")]


def test_vllm_gpu_blocks_less_the_null_block(server: str) -> None:
    (g1,) = reported_capacities(_scn(server), "vllm")
    assert (g1.tier, g1.tokens, g1.block_tokens) == ("G1", 1000 * 16, 16)


@pytest.mark.parametrize(
    ("base_url", "engine"), [(None, "vllm"), ("URL", None), ("URL", "mock"), ("URL", "nosuch")]
)
def test_no_capacities_without_a_server_or_an_adapter_that_reads_them(
    server: str, base_url: str | None, engine: str | None
) -> None:
    url = server if base_url == "URL" else None
    assert reported_capacities(_scn(url), engine) == []
    assert _Handler.seen == []


# --- the sweep's series and its tier-cliff map ----------------------------------------------------


def test_series_groups_by_the_second_field_and_the_baseline_arm() -> None:
    rows = [
        {"concurrency": "4", "prompt": 1, "requests": 8},
        {"concurrency": "1", "prompt": 1, "requests": 8},
        {"concurrency": "2", "prompt": 2, "requests": 8, "arm": "baseline"},
        {"concurrency": "x", "prompt": 2, "requests": 8},  # not a number: not drawn
        {"concurrency": "8", "prompt": 2, "requests": 0},  # not measured
    ]
    got = series(rows, "concurrency", "prompt")
    assert {k: [r["concurrency"] for r in v] for k, v in got.items()} == {
        "prompt=1": ["1", "4"],
        "prompt=2 offload off": ["2"],
    }
    assert list(series(rows[:2], "concurrency", None)) == [""]


def _axes() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    return fig, ax


POINTS = [
    {
        "working_set_tokens": 64000,
        "ttft_p50_ms": 900.0,
        "ttft_p99_ms": 950.0,
        "serving_tier": "recompute",
        "hit_ratio": 0.0,
        "requests": 4,
        "mock_late": True,
    },
    {
        "working_set_tokens": 1000,
        "ttft_p50_ms": 20.0,
        "ttft_p99_ms": 25.0,
        "serving_tier": "G1",
        "hit_ratio": 0.95,
        "requests": 4,
    },
    {
        "working_set_tokens": 8000,
        "ttft_p50_ms": 200.0,
        "ttft_p99_ms": 260.0,
        "serving_tier": "G4",
        "hit_ratio": 0.9,
        "requests": 4,
    },
    {"working_set_tokens": None, "ttft_p50_ms": 1.0},  # no working set: not a point of the map
]


def test_the_cliff_map_colours_points_by_tier_and_marks_the_boundaries() -> None:
    import matplotlib.pyplot as plt

    fig, ax = _axes()
    cliff = {
        "boundaries": [{"tier": "G1", "tokens": 4000}, {"tier": "G4", "tokens": 32000}],
        "source": "s" * 200,
    }
    try:
        draw_cliff(ax, POINTS, cliff)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == [
            "p99",
            "served by G1",
            "served by G4",
            "recomputed",
            "mock late: TTFT partly this machine",
        ]
        p50 = ax.get_lines()[0]
        assert list(p50.get_xdata()) == [1000, 8000, 64000]  # in working-set order
        assert list(p50.get_ydata()) == [20.0, 200.0, 900.0]
        verticals = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert verticals == [4000, 32000]
        assert ax.get_xscale() == "log"  # 64x range
        title = ax.get_title()
        assert "s" * 107 + "..." in title and "s" * 108 not in title
        assert "1 point(s) ringed red" in title
        (twin,) = [a for a in fig.axes if a is not ax]
        assert twin.get_ylabel() == "warm hit ratio (x, black)"
        assert list(twin.get_lines()[0].get_ydata()) == [0.95, 0.9, 0.0]
    finally:
        plt.close(fig)


def test_a_narrow_cached_phase_map_stays_linear_without_p99_or_hits() -> None:
    import matplotlib.pyplot as plt

    fig, ax = _axes()
    rows = [
        {"working_set_tokens": n, "ttft_p50_ms": 10.0 * n, "serving_tier": "cached"} for n in (1000, 3000)
    ]
    try:
        draw_cliff(ax, rows, {}, what="cached-phase")
        assert ax.get_xscale() == "linear"
        assert ax.get_xlabel() == "working set (tokens)"
        assert ax.get_ylabel().startswith("cached-phase TTFT (ms)")
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["cached (tier not reported)"]
        assert len(fig.axes) == 1  # no hit ratio: no right axis
    finally:
        plt.close(fig)


# --- a point's progress line ----------------------------------------------------------------------


def test_progress_line_says_attainment_lateness_and_the_offload_overhead() -> None:
    from kvbench.sweep.execute import progress_line

    m = {
        "ok": 7,
        "requests": 8,
        "throughput_rps": 3.14159,
        "ttft_p50_ms": 12.345,
        "ttft_p99_ms": None,
        "attainment": 0.75,
        "attainment_ci": (0.5, 0.9),
        "goodput_rps": None,
        "mock_late": True,
        "mock_late_share": 0.3,
        "overhead_ttft_p50": 0.125,
        "overhead_ttft_p50_ci": (0.05, 0.2),
        "overhead_modelled_ttft_p50": -0.02,
    }
    assert progress_line(3, "c=4", m, slo=True) == (
        "[3] c=4: 7/8 ok, 3.14 req/s, TTFT p50 12.35 ms p99 - ms, attainment 75% [50%, 90%], "
        "goodput - req/s, LATE: mock lateness 30% of the modelled TTFT, "
        "offload overhead TTFT p50 +12.5% [+5.0%, +20.0%], "
        "offload overhead modelled TTFT p50 -2.0%"
    )
    plain = progress_line(1, "c=1", {"ok": 0, "requests": 0, "attainment": 0.5}, slo=False)
    assert plain == "[1] c=1: 0/0 ok, - req/s, TTFT p50 - ms p99 - ms"
