"""kvbench audit: the shipped IBM G4 dataset, a planted claims file, bad files, the arithmetic under it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvbench.audit import audit, format_ledger, load_claims, parse_claims
from kvbench.audit.commands import register
from kvbench.audit.expr import ExprError, eval_expr, parse_expr
from kvbench.audit.quantities import Interval
from kvbench.audit.units import parse_unit
from kvbench.errors import UsageError
from kvbench.model.prefill import (
    cold_reuse_speedup,
    fit_prefill,
    required_shared_fraction,
    shared_fraction_for_suffix,
    suffix_time,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "claims"


@pytest.fixture(scope="module")
def ledger():
    return audit(load_claims())


def _claim(ledger, cid):
    return next(c for c in ledger.claims if c.id == cid)


def test_shipped_dataset_flags_the_18_percent(ledger):
    c = _claim(ledger, "noisy-reduction")
    assert c.verdict == "discrepancy"
    assert c.recomputed.mid == pytest.approx(15.49, abs=0.01)
    texts = " | ".join(f"{r.text} = {r.value:.2f}" for r in c.readings)
    # the time reading (46.94 -> 55.56 s) and the drop relative to its end value both give 18%;
    # the same time reading through other figures (requests / rate) is not repeated
    assert len(c.readings) == 2, texts
    assert any(
        "46.94 s" in r.text and "55.56 s" in r.text and r.value == pytest.approx(18.36, abs=0.01)
        for r in c.readings
    ), texts
    assert any(
        "relative to the end value 3.6" in r.text and r.value == pytest.approx(18.33, abs=0.01)
        for r in c.readings
    ), texts
    assert all(17.5 <= r.value < 18.5 for r in c.readings)


@pytest.mark.parametrize(
    ("cid", "value"),
    [
        ("ttft-speedup-130k", 56.39),
        ("throughput-speedup-rates", 22.42),
        ("throughput-speedup-totals", 22.33),
        ("rate-baseline-vs-total", 0.1908),
        ("rate-cached-vs-total", 4.2608),
        ("rate-noisy-vs-total", 3.5997),
        ("ttft-growth-cached", 0.377),
    ],
)
def test_shipped_dataset_consistent_claims(ledger, cid, value):
    c = _claim(ledger, cid)
    assert c.verdict == "consistent"
    assert c.recomputed.mid == pytest.approx(value, abs=0.005)


def test_unpublished_figure_is_unverifiable_and_implied(ledger):
    c = _claim(ledger, "ttft-growth-uncached")
    assert c.verdict == "unverifiable"
    fig = next(f for f in ledger.figures if f.id == "ttft_uncached_30k")
    assert fig.kind == "implied" and fig.implied_by == "ttft-growth-uncached"
    assert fig.interval.mid == pytest.approx(2.59, abs=1e-6)
    scaling = next(b for b in ledger.bounds if b["kind"] == "prefill_scaling")
    assert "implied" in scaling["basis"]
    assert scaling["linear_prediction_s"] == pytest.approx(32.14 * 30 / 130)


def test_kv_size_claim_reads_as_gib(ledger):
    c = _claim(ledger, "kv-data-total")
    assert c.verdict == "discrepancy"
    assert c.recomputed.mid == pytest.approx(884.7, abs=0.1)  # GB, 18 full-attention layers
    assert any(r.unit == "GiB" and r.value == pytest.approx(823.97, abs=0.01) for r in c.readings)
    # a reading must never be the stated figure itself
    assert not any("kv_data_total" in r.figures for r in c.readings)


def test_sizing_readings(ledger):
    sz = ledger.sizing[0]
    fitting = [r for r in sz["rows"] if r["fits"]]
    assert len(fitting) == 2
    assert {r["layers"].split(" ")[0] for r in fitting} == {"18", "all"}
    assert all("GiB" in r["fits"][0] for r in fitting)
    assert sz["tokens_per_request"] == pytest.approx(120_000)
    assert any("EXCEEDS" in n for n in sz["notes"])  # 24M / 100 prompts = 240k > context


def test_cold_reuse_bound(ledger):
    b = next(b for b in ledger.bounds if b["kind"] == "cold_reuse")
    assert b["max_speedup_no_sharing"] == pytest.approx(2.0)
    assert b["required_shared_fraction"]["linear"] == pytest.approx(1 - (200 / 22 - 1) / 99)
    assert 0.91 < b["required_shared_fraction"]["linear"] < 0.92
    assert 0.95 < b["required_shared_fraction"]["quadratic"] < 0.96
    assert any("cache hit costs nothing" in a for a in b["assumptions"])
    f = b["required_shared_fraction"]["linear"]
    assert cold_reuse_speedup(2, 100, f) == pytest.approx(22.0)
    assert required_shared_fraction(2, 100, 1.5) == 0.0
    assert required_shared_fraction(2, 100, 500) is None


def _bound_of(ledger, bid):
    return next(b for b in ledger.bounds if b["id"] == bid)


def test_baseline_gpu_time_bound(ledger):
    b = _bound_of(ledger, "baseline-gpu-time")
    assert b["kind"] == "serial_prefill"
    assert "ttft_uncached_30k (implied" in b["basis"]
    # derived from the dataset: t(n) = a n + c n^2 through (30k, 32.14 - 29.55) and (130k, 32.14)
    a, c = fit_prefill(30_000, 32.14 - 29.55, 130_000, 32.14)
    assert (b["fit"]["a_s_per_token"], b["fit"]["c_s_per_token2"]) == pytest.approx((a, c))
    assert b["mean_tokens"] == pytest.approx(24e6 / 200)
    assert b["prefill_time_mean_s"] == pytest.approx(a * 120_000 + c * 120_000**2)
    assert b["gpu_time_s"] == pytest.approx(5540, rel=0.01)
    assert b["needed_gain"] == pytest.approx(b["gpu_time_s"] / 1048)
    assert 5.2 < b["needed_gain"] < 5.4
    how = {r["how"]: r for r in b["reconcile"]}
    f = how["shared_prefix"]["shared_fraction"]
    assert f["linear"] < f["fit"] < f["quadratic"]
    assert 0.89 < f["fit"] < 0.90
    # the f found brings the serial work down to the published total exactly
    t_n = b["prefill_time_mean_s"]
    assert t_n + 199 * suffix_time(a, c, 120_000, f["fit"]) == pytest.approx(1048)
    # ... but then the cold cache can beat that baseline by about (R-1)/(P-1) only, not 22x
    assert how["shared_prefix"]["cached_speedup_cap"] == pytest.approx(1.96, abs=0.01)
    assert how["shared_prefix"]["claim_stated"] == 22
    assert how["gpus"]["gpus_needed"] == 6
    assert how["gpus"]["time_on_available_s"] > 1048  # all 4 GPUs of the node are not enough
    assert b["cold_run"]["needed_gain"] == pytest.approx(100 * t_n / 46.94)
    assert b["verdict"].startswith("inconsistent unless")
    assert any("saturates the GPU" in x for x in b["assumptions"])


def test_shared_fraction_for_suffix_inverts_suffix_time():
    a, c = 4e-5, 1.6e-9
    for f in (0.0, 0.3, 0.8, 0.99):
        assert shared_fraction_for_suffix(a, c, 1e5, suffix_time(a, c, 1e5, f)) == pytest.approx(f, abs=1e-9)
    assert shared_fraction_for_suffix(a, 0.0, 1e5, 2.0) == pytest.approx(0.5)  # linear only
    assert shared_fraction_for_suffix(a, c, 1e5, 1e9) == 0.0
    assert shared_fraction_for_suffix(a, c, 1e5, -1.0) is None


def test_noise_bandwidth_bound(ledger):
    b = _bound_of(ledger, "noise-bandwidth")
    assert b["kind"] == "bandwidth_headroom"
    rates = [d["rate"] for d in b["demand_readings"]]
    assert rates[0] == pytest.approx(825e9 / 46.94)  # kv_read_rate_implied, ~17.6 GB/s
    # the sizing reading: 24M tokens x 36,864 B plus each of the 200 sequences' sliding windows
    window = 18 * 128 * 2048
    assert max(rates) == pytest.approx((24e6 * 36_864 + 200 * window) / 46.94)  # ~18.9 GB/s
    assert b["demand"] == max(rates)
    assert b["noise_per_source"] == pytest.approx(50e9)
    rows = {r["figure"]: r for r in b["rows"]}
    st, cl = rows["storage_read_bw"], rows["client_net_bw"]
    assert st["noise_shares"] and not cl["noise_shares"]
    assert st["load"] == pytest.approx(200e9 + b["demand"])
    assert st["headroom"] == pytest.approx(315e9 - 200e9 - b["demand"])
    assert 95e9 < st["headroom"] < 98e9
    assert cl["headroom"] == pytest.approx(80e9 - b["demand"])
    assert st["fits"] and cl["fits"] and b["fits"]
    assert cl["load_if_noise_shared"] > cl["capacity"]  # had the noise crossed the client link
    assert cl["noise_per_source_fits"]
    assert b["throughput_drop"] == pytest.approx(1 - 3.6 / 4.26)
    # saturation would need the storage to deliver only ~216 of its 315 GB/s
    assert st["capacity_to_explain_drop"] == pytest.approx(200e9 + b["demand"] * 3.6 / 4.26)
    assert "cannot explain the 15.5% throughput drop" in b["verdict"]


def test_bandwidth_bound_reports_saturation_and_validates():
    doc = {
        "name": "x",
        "figures": [
            {"id": "noise", "value": 70, "unit": "GB/s"},
            {"id": "kv_rate", "value": 20, "unit": "GB/s"},
            {"id": "link", "value": 80, "unit": "GB/s"},
        ],
        "bounds": [
            {
                "id": "bw",
                "kind": "bandwidth_headroom",
                "noise": "noise",
                "demand": ["kv_rate"],
                "capacities": [{"figure": "link"}],
            }
        ],
    }
    b = audit(parse_claims(doc)).bounds[0]
    assert not b["fits"] and b["rows"][0]["headroom"] == pytest.approx(-10e9)
    assert b["verdict"].startswith("over capacity in link")
    bad = {
        **doc,
        "bounds": [{"id": "bw", "kind": "bandwidth_headroom", "noise": "noise", "demand": ["nope"]}],
    }
    # a bound that cannot be computed is that bound's verdict, not the file's
    b = audit(parse_claims(bad, source="t.yaml")).bounds[0]
    assert b["status"] == "invalid" and "bounds[0].demand[0]: unknown figure 'nope'" in b["headline"]
    bad = {**doc, "bounds": [{"id": "g", "kind": "serial_prefill", "short_tokens": "noise"}]}
    b = audit(parse_claims(bad, source="t.yaml")).bounds[0]
    assert (
        b["status"] == "invalid" and "bounds[0].short_time: required for kind serial_prefill" in b["verdict"]
    )


def test_ledger_text_mentions_everything(ledger):
    text = format_ledger(ledger)
    for needle in (
        "[DISCREPANCY] noisy-reduction",
        "ok rate-cached-vs-total: requests_total / total_cached = 4.261 [4.250, 4.272] req/s, stated 4.26",
        "18.36",
        "824.0",
        "91.8%",
        "ASSUMPTIONS",
        "[unverifiable]",
        "BOUND baseline-gpu-time",
        "BOUND noise-bandwidth",
        "=> inconsistent unless",
        "=> the totals fit",
    ):
        assert needle in text


def test_planted_claims_file():
    led = audit(load_claims(DATA / "planted.yaml"))
    verdicts = {c.id: c.verdict for c in led.claims}
    assert verdicts == {"rate-from-time": "consistent", "slowdown": "discrepancy"}
    slow = _claim(led, "slowdown")
    assert slow.recomputed.mid == pytest.approx(20.0)
    assert any("time_fast" in r.text and "time_slow" in r.text for r in slow.readings)
    # model_size (GiB, another test tag) is never offered as a reading
    assert not any("model_size" in r.figures for r in slow.readings)


def test_bad_claims_file_names_the_path():
    with pytest.raises(UsageError, match=r"unknown_key.yaml: .*colour: Extra inputs"):
        load_claims(DATA / "bad" / "unknown_key.yaml")
    broken = _claim(audit(load_claims(DATA / "invalid" / "unknown_figure.yaml")), "broken")
    assert broken.verdict == "invalid" and "claims[1].expr: unknown figure 'foo'" in broken.headline


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"name": "x", "figures": [{"id": "a", "value": 1, "expr": "2"}]},
            r"figures\[0\]: a figure needs exactly",
        ),
        ({"name": "x", "figures": [{"id": "a", "value": 1, "colour": 2}]}, r"figures\[0\]\.colour"),
        (
            {"name": "x", "figures": [{"id": "a", "value": 1}, {"id": "a", "value": 2}]},
            "duplicate figure 'a'",
        ),
        ({"name": "x", "schema": "other/2", "figures": []}, "unsupported schema"),
    ],
)
def test_schema_errors(doc, message):
    with pytest.raises(UsageError, match=message):
        parse_claims(doc, source="t.yaml")


@pytest.mark.parametrize(
    ("expr", "message"),
    [("a.__class__", "claims[0].expr: Attribute"), ("evil(a)", "unknown function 'evil'")],
)
def test_unsafe_expression_is_an_invalid_claim(expr, message):
    doc = {
        "name": "x",
        "figures": [{"id": "a", "value": 1}],
        "claims": [{"id": "c", "expr": expr, "stated": 1}],
    }
    c = audit(parse_claims(doc, source="t.yaml")).claims[0]
    assert c.verdict == "invalid" and message in c.headline and c.recomputed is None


def test_interval_and_units():
    a = Interval.printed(3.6, 1)
    assert (a.lo, a.hi) == pytest.approx((3.55, 3.65))
    assert Interval.printed(24e6, -6).lo == pytest.approx(23.5e6)
    r = Interval.printed(4.26, 2) / a
    assert r.lo < 4.26 / 3.6 < r.hi
    assert parse_unit("GiB").factor == 2**30
    assert parse_unit("req/s").dims == (("requests", 1), ("time", -1))
    assert parse_unit("B/token").dims == parse_unit("GB/tokens").dims
    tree = parse_expr("percent_drop(x, y)", ["x", "y"])
    v = eval_expr(tree, {"x": Interval.exact(4.26), "y": Interval.exact(3.6)})
    assert v.mid == pytest.approx(1 - 3.6 / 4.26)
    with pytest.raises(ExprError):
        parse_expr("__import__('os')", ["x"])


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_cli_audit_exit_codes(tmp_path):
    runner = CliRunner()
    res = runner.invoke(_app(), ["audit"])
    assert res.exit_code == 0, res.output
    assert "noisy-reduction" in res.output
    res = runner.invoke(_app(), ["audit", "--strict"])
    assert res.exit_code == 1
    res = runner.invoke(_app(), ["audit", "--json"])
    data = json.loads(res.output)
    assert data["summary"]["discrepancy"] == 2
    bounds = {b["id"]: b for b in data["bounds"]}
    assert {"cold-reuse-bound", "uncached-ttft-scaling", "baseline-gpu-time", "noise-bandwidth"} <= set(
        bounds
    )
    assert bounds["baseline-gpu-time"]["needed_gain"] == pytest.approx(5.29, abs=0.01)
    assert bounds["noise-bandwidth"]["fits"] is True
    good = tmp_path / "good.yaml"
    good.write_text(
        "schema: kvbench-claims/1\nname: g\nfigures:\n  - {id: a, value: 2, unit: s}\n"
        "claims:\n  - {id: c, expr: 'a * 2', stated: 4, unit: s}\n"
    )
    assert runner.invoke(_app(), ["audit", str(good), "--strict"]).exit_code == 0
    res = runner.invoke(_app(), ["audit", str(DATA / "bad" / "unknown_key.yaml")])
    assert isinstance(res.exception, UsageError)
    assert "--strict" in runner.invoke(_app(), ["audit", "--help"]).output


def test_compare_section_is_accepted_raw():
    # the report reads `compare:`; the audit keeps it as a raw list without validating it
    doc = {"name": "x", "figures": [{"id": "a", "value": 1}], "compare": [{"anything": ["goes", 1]}]}
    cf = parse_claims(doc)
    assert cf.compare == [{"anything": ["goes", 1]}]
    assert audit(cf).claims == []


def test_reference_is_data_only():
    import subprocess
    import sys

    code = "import sys, kvbench.reference; print(sorted(m for m in sys.modules if m.startswith('kvbench.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['kvbench.errors', 'kvbench.reference']"


def test_audit_commands_import_is_light():
    import subprocess
    import sys

    code = (
        "import sys, kvbench.audit.commands; "
        "print([m for m in ('pandas', 'numpy', 'matplotlib', 'yaml', 'pydantic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
