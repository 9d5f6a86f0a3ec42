"""kvbench audit on fictional papers with planted errors (the key is in each file's header),
and one test per item of issue #14 that failed on the code before the audit/ split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvbench.audit import audit, format_ledger, load_claims, parse_claims
from kvbench.audit.commands import register

PAPERS = Path(__file__).resolve().parents[1] / "data" / "claims" / "papers"
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"

# claim id -> (verdict, words the first reading or note must contain)
KEY = {
    "paper_a_proxy.yaml": {
        "rate-proxy": ("consistent", None),
        "speedup": ("consistent", None),
        "throughput-gain": ("discrepancy", "relative to the end value 4.0 req/s"),
        "latency-cut": ("discrepancy", "relative to the end value 0.5 s"),
        "served": ("discrepancy", None),
    },
    "paper_b_memory.yaml": {
        "kv-per-token-kib": ("consistent", None),
        "kv-per-token-kb": ("discrepancy", "in KiB/token"),
        "host-cache": ("discrepancy", "in GiB"),
        "load-rate": ("consistent", None),
        "load-time": ("discrepancy", "in ms"),
    },
    "paper_c_clean.yaml": {
        c: ("consistent", None)
        for c in (
            "rate-quiet",
            "rate-noisy",
            "drop",
            "time-rise",
            "ratio",
            "prompt-kv",
            "prompt-kv-mib",
            "quiet-ms",
        )
    },
    "paper_e_one_bad_unit.yaml": {
        "mean-ttft": ("invalid", "gives s/request, not s; write unit: s/request"),
        "rate": ("consistent", None),
        "speedup": ("discrepancy", None),
        "rate-drop": ("consistent", None),
        "per-gpu-rate": ("invalid", "uses invalid figure 'gpus'"),
    },
    "paper_f_rounding_edges.yaml": {
        "per-shard-small": ("discrepancy", None),
        "per-node-half": ("discrepancy", None),
        "total-included": ("consistent", None),
        "total-low": ("consistent", "only within the rounding of its inputs"),
    },
    "paper_g_sizing_repeats.yaml": {"per-request": ("consistent", None)},
    "paper_h_display.yaml": {"far-speedup": ("discrepancy", None), "near-speedup": ("consistent", None)},
    "paper_d_implied.yaml": {
        "growth-cold": ("unverifiable", "implies ttft_cold_short = 2"),
        "speedup-short": ("unverifiable", "rests on ttft_cold_short"),
        "speedup-short-13": ("unverifiable", "needs ttft_cold_short = 2.600"),
        "throughput-gain": ("unverifiable", "implies rate_base = 0.2500"),
        "warm-growth": ("consistent", None),
    },
}


def _claims(name):
    return {c.id: c for c in audit(load_claims(PAPERS / name)).claims}


@pytest.mark.parametrize("name", sorted(KEY))
def test_papers_match_their_key(name):
    assert {p.name for p in PAPERS.glob("*.yaml")} == set(KEY)
    claims = _claims(name)
    assert set(claims) == set(KEY[name])
    for cid, (verdict, words) in KEY[name].items():
        c = claims[cid]
        assert c.verdict == verdict, (cid, c.verdict, c.notes)
        if words is not None:
            texts = [r.text for r in c.readings[:1]] + c.notes + [c.headline]
            assert any(words in t for t in texts), (cid, texts)


def test_clean_paper_has_no_discrepancy_and_no_finding():
    led = audit(load_claims(PAPERS / "paper_c_clean.yaml"))
    assert not led.discrepancies and not led.findings
    app = typer.Typer()
    register(app)
    assert CliRunner().invoke(app, ["audit", str(PAPERS / "paper_c_clean.yaml"), "--strict"]).exit_code == 0


def test_one_bad_unit_leaves_a_ledger_for_every_other_claim():
    led = audit(load_claims(PAPERS / "paper_e_one_bad_unit.yaml"))
    mean = next(c for c in led.claims if c.id == "mean-ttft")
    assert mean.fix == "s/request" and len(mean.headline) <= 200
    gpus = next(f for f in led.figures if f.id == "gpus")
    assert 'unit "1"' in (gpus.invalid or "")
    assert led.invalid == ["gpus", "mean-ttft", "per-gpu-rate"]
    text = format_ledger(led)
    assert text.count("known:") == 0 and "requests*s (requests*s)" not in text  # no unit list, once or more


def test_touching_rounding_ranges_are_decided_exactly():
    from fractions import Fraction

    from kvbench.audit.quantities import Interval, exact_range, match

    floats = Interval.printed(0.02, 2).scale(3.0)
    assert floats.hi > 0.075  # the float noise the exact decision removes
    exact = Interval.printed_exact(0.02, 2).scale(Fraction(3))
    assert exact.hi == Fraction(3, 40) == exact_range(0.08, 2)[0]
    assert match(exact, *exact_range(0.08, 2), exact=True) is None
    assert (
        match(Interval.printed_exact(0.65, 2).scale(Fraction(3)), *exact_range(2.0, 1), exact=True) == "exact"
    )
    claims = _claims("paper_f_rounding_edges.yaml")
    assert not claims["per-shard-small"].readings  # 0.07 s [0.065, 0.075) only touches "0.08" too


def test_sizing_counted_with_repeats_is_not_a_finding():
    app = typer.Typer()
    register(app)
    path = str(PAPERS / "paper_g_sizing_repeats.yaml")
    assert CliRunner().invoke(app, ["audit", path, "--strict"]).exit_code == 0
    sz = audit(load_claims(path)).sizing[0]
    assert sz["status"] == "ok" and sz["fits"] and "must include repeats" in sz["headline"]


@pytest.mark.parametrize("name", [None, *sorted(p.name for p in PAPERS.glob("*.yaml"))])
def test_sizing_and_bounds_say_one_thing_in_text_and_json(name):
    from kvbench.audit.text import MARK

    led = audit(load_claims(None if name is None else PAPERS / name))
    text, data = format_ledger(led), json.loads(json.dumps(led.to_dict(), default=str))
    rows = {(r["what"], r["id"]): r for r in data["verdicts"]}
    for what, items in (("sizing", data["sizing"]), ("bound", data["bounds"])):
        for x in items:
            assert x["status"] in ("ok", "finding", "invalid")
            assert rows[(what, x["id"])]["verdict"] == x["status"]
            assert rows[(what, x["id"])]["conclusion"] == x["headline"]
            assert f"{MARK[x['status']]} {what} {x['id']}" in text
            if what == "sizing":
                assert x["verdict"] == x["headline"]  # no 'fits' beside a finding


def test_table_shows_the_digits_that_tell_a_discrepancy_apart():
    text = format_ledger(audit(load_claims(PAPERS / "paper_h_display.yaml")))
    assert "!! far-speedup         recomputed 9.47x;" in text
    assert "ok near-speedup        recomputed 9.5x" in text


@pytest.mark.parametrize("width", [72, 100, 140])
def test_lines_wrap_to_the_width_asked_for(width):
    led = audit(load_claims(PAPERS / "paper_h_display.yaml"))
    lines = format_ledger(led, width=width).splitlines()
    assert max(len(x) for x in lines) <= width
    assert width == 72 or max(len(x) for x in lines) > 72  # wider when allowed


def test_cli_wraps_at_100_when_not_a_terminal():
    app = typer.Typer()
    register(app)
    out = CliRunner().invoke(app, ["audit", str(PAPERS / "paper_h_display.yaml")]).output
    assert max(len(x) for x in out.splitlines()) <= 100


def test_item1_claim_on_an_implied_figure_is_unverifiable_never_consistent():
    c = _claims("paper_d_implied.yaml")["speedup-short"]  # 10x = implied 2.0 s / 0.2 s
    assert c.verdict == "unverifiable" and c.recomputed is None
    assert c.implied_needed["ttft_cold_short"] == pytest.approx(2.0)
    c13 = _claims("paper_d_implied.yaml")["speedup-short-13"]
    assert c13.implied_needed["ttft_cold_short"] == pytest.approx(2.6)


def test_item1_shipped_13x_at_30k_is_unverifiable():
    from kvbench.audit.reader import read_yaml
    from kvbench.reference import reference_path

    doc = read_yaml(reference_path())
    doc["claims"].append({"id": "x13", "expr": "ttft_speedup_30k_implied", "stated": 13, "unit": "x"})
    c = next(c for c in audit(parse_claims(doc)).claims if c.id == "x13")
    assert c.verdict == "unverifiable"
    assert c.implied_needed["ttft_uncached_30k"] == pytest.approx(13 * 0.193)


def _doc(figures, claims=(), **more):
    return {
        "schema": "kvbench-claims/1",
        "name": "t",
        "figures": list(figures),
        "claims": list(claims),
        **more,
    }


@pytest.mark.parametrize(
    ("figures", "claim", "message"),
    [
        (
            [{"id": "t", "value": 2, "unit": "s"}, {"id": "g", "value": 8, "unit": "GB"}],
            "t + g",
            "cannot add s and GB",
        ),
        ([{"id": "r", "value": 2, "unit": "req/s"}], "r", "gives req/s, not GB; write unit: req/s"),
        ([{"id": "t", "value": 2, "unit": "s"}], "t", "unknown unit 'furlongs'"),
    ],
)
def test_item2_units_are_dimensions(figures, claim, message):
    unit = "furlongs" if "furlongs" in message else ("GB" if "GB" in message else "s")
    doc = _doc(figures, [{"id": "c", "expr": claim, "stated": 2, "unit": unit}])
    c = audit(parse_claims(doc, source="t.yaml")).claims[0]
    assert c.verdict == "invalid" and message in c.headline


def test_item2_extra_counted_things_are_declared():
    doc = _doc(
        [{"id": "w", "value": 4, "unit": "widgets"}],
        [{"id": "c", "expr": "w", "stated": 4, "unit": "widgets"}],
    )
    led = audit(parse_claims(doc))
    assert led.figures[0].invalid is not None and "unknown unit 'widgets'" in led.figures[0].invalid
    assert led.claims[0].verdict == "invalid"
    assert audit(parse_claims({**doc, "units": ["widgets"]})).claims[0].verdict == "consistent"


def test_item3_decimals_default_to_how_the_value_is_written(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text(
        "schema: kvbench-claims/1\nname: d\nfigures:\n  - {id: t, value: 0.40, unit: s}\n"
        "claims:\n  - {id: c, expr: t, stated: 0.25, unit: s}\n  - {id: k, expr: t, stated: 0.40, unit: s}\n"
    )
    led = audit(load_claims(f))
    c, k = led.claims
    assert c.verdict == "discrepancy" and c.decimals == 2 and c.stated_text == "0.25 s"
    assert k.verdict == "consistent" and k.stated_text == "0.40 s"  # as written, trailing zero kept
    assert led.figures[0].decimals == 2
    assert "stated     0.25 s" in format_ledger(led)


def test_item4_rise_read_relative_to_its_other_end():
    doc = _doc(
        [
            {"id": "a", "value": 4, "unit": "s", "decimals": 2},
            {"id": "b", "value": 5, "unit": "s", "decimals": 2},
        ],
        [{"id": "c", "expr": "percent_increase(a, b)", "stated": 20, "unit": "%", "decimals": 0}],
    )
    c = audit(parse_claims(doc)).claims[0]
    assert c.verdict == "discrepancy"  # 4 -> 5 is +25 %; relative to 5 it is 20 %, not 33.3 %
    assert c.readings[0].value == pytest.approx(20.0)
    assert "the rise from 4.00 s to 5.00 s taken relative to the end value 5.00 s" in c.readings[0].text


def test_item7_kb_read_as_kib():
    doc = _doc(
        [{"id": "b", "value": 73728, "unit": "B"}], [{"id": "c", "expr": "b", "stated": 72, "unit": "KB"}]
    )
    c = audit(parse_claims(doc)).claims[0]
    assert c.verdict == "discrepancy"
    assert any(r.unit == "KiB" and r.value == pytest.approx(72.0) for r in c.readings)


def test_item8_divisor_straddling_zero_does_not_pass_everything():
    doc = _doc(
        [{"id": "a", "value": 5, "unit": "s"}, {"id": "d", "value": 0.1, "unit": "s", "decimals": 0}],
        [{"id": "c", "expr": "ratio(a, d)", "stated": 7, "unit": "x"}],
    )
    c = audit(parse_claims(doc)).claims[0]
    assert c.verdict == "discrepancy"
    assert c.recomputed.lo == c.recomputed.hi == pytest.approx(50.0)


def test_item9_unpublished_divisor_is_solved():
    c = _claims("paper_d_implied.yaml")["throughput-gain"]
    assert c.implied_needed["rate_base"] == pytest.approx(0.25)


def test_item10_relative_geometry_path_is_taken_against_the_claims_file(tmp_path, monkeypatch):
    folder = tmp_path / "paper"
    shutil.copytree(CONFIGS / "tiny-gemma", folder / "configs" / "tiny-gemma")
    (folder / "claims.yaml").write_text(
        "schema: kvbench-claims/1\nname: g\nmodel: {geometry: configs/tiny-gemma}\n"
        "figures:\n  - {id: ctx, from_model: context_length, unit: tokens}\n"
        "claims:\n  - {id: c, expr: ctx, stated: 32768, unit: tokens}\n"
    )
    monkeypatch.chdir(tmp_path)  # not the claims file's folder
    assert audit(load_claims(folder / "claims.yaml")).claims[0].verdict == "consistent"


def test_item12_verdict_table_first_and_short(tmp_path):
    led = audit(load_claims())
    text = format_ledger(led)
    lines = text.splitlines()
    table_end = lines.index("CLAIMS")
    assert table_end <= 40
    table = " ".join(" ".join(lines[:table_end]).split())  # verdict lines wrap at the width
    for needle in (
        "!! noisy-reduction",
        "the drop taken relative to 3.6 req/s (18.3%), or the rise 46.94 -> 55.56 s (18.4%)",
        "825 GB = the same quantity in GiB (824.0 GiB)",
        "240,000 tokens per prompt > the 131,072-token context",
        "needs prompts sharing >= 91.8% of their tokens",
        "the 1,048 s baseline is 5.3x faster than one GPU can prefill",
        "4 bounds: 2 finding(s), 2 ok",
    ):
        assert needle in table, needle
    assert all(len(line) <= 100 for line in lines), [x for x in lines if len(x) > 100]


def test_item12_strict_fails_on_a_bound_finding_and_json_is_complete(tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text(
        "schema: kvbench-claims/1\nname: b\nfigures:\n  - {id: r, value: 200, unit: requests}\n"
        "  - {id: p, value: 100, unit: prompts}\nbounds:\n"
        "  - {id: reuse, kind: cold_reuse, requests: r, prompts: p, stated: 22}\n"
    )
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    assert runner.invoke(app, ["audit", str(f)]).exit_code == 0
    assert runner.invoke(app, ["audit", str(f), "--strict"]).exit_code == 1
    data = json.loads(runner.invoke(app, ["audit", "--json"]).output)
    assert data["summary"]["bound_findings"] == 2 and data["summary"]["sizing_findings"] == 1
    assert {r["id"] for r in data["verdicts"]} >= {"noisy-reduction", "baseline-gpu-time", "working-set"}
    assert all(r["conclusion"] for r in data["verdicts"])


def test_claims_carry_what_they_rest_on():
    claims = _claims("paper_d_implied.yaml")
    assert claims["warm-growth"].basis == "published"
    assert claims["speedup-short"].basis == "implied"
    assert claims["throughput-gain"].basis == "implied"  # solved from its own stated value
    assert _claims("paper_b_memory.yaml")["host-cache"].basis == "model"
