"""The audit on files it used to stall on or refuse (issue #39): the reading search's bounded
scope, YAML 1.1 number forms, `count` and plain counted words, hints of the same dimension."""

from __future__ import annotations

import pytest

from kvbench.audit import audit, load_claims, parse_claims
from kvbench.audit.figures import Figures
from kvbench.audit.readings.pool import SCOPE, Search
from kvbench.audit.units import UnitError, parse_unit


def _doc(figures, claims=(), **more):
    return {
        "schema": "kvbench-claims/1",
        "name": "t",
        "figures": list(figures),
        "claims": list(claims),
        **more,
    }


def test_exponent_without_dot_or_sign_is_a_number(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text(
        "schema: kvbench-claims/1\nname: e\nfigures:\n"
        "  - {id: bw, value: 2.4e9, unit: B/s}\n  - {id: n, value: 1e3, unit: requests}\n"
        "claims:\n  - {id: c, expr: bw, stated: 2.4, unit: GB/s}\n"
    )
    led = audit(load_claims(p))
    assert [f.interval.mid for f in led.figures] == [pytest.approx(2.4e9), pytest.approx(1000.0)]
    assert led.claims[0].verdict == "consistent"


def test_a_quoted_number_is_still_refused(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text("schema: kvbench-claims/1\nname: q\nfigures:\n  - {id: bw, value: '2.4e9', unit: B/s}\n")
    with pytest.raises(Exception, match="without quotes"):
        load_claims(p)


@pytest.mark.parametrize("unit", ["count", "sessions", "batches", "requests", "prompts", "session"])
def test_count_and_counted_words_are_counts(unit):
    doc = _doc(
        [{"id": "n", "value": 120, "unit": unit}, {"id": "t", "value": 60, "unit": "s"}],
        [{"id": "c", "expr": "n / t", "stated": 2.0, "unit": f"{unit}/s"}],
    )
    led = audit(parse_claims(doc))
    assert led.claims[0].verdict == "consistent", led.claims[0].headline


def test_declared_units_still_add_names():
    doc = _doc(
        [{"id": "w", "value": 4, "unit": "widgets"}],
        [{"id": "c", "expr": "w", "stated": 4, "unit": "widgets"}],
    )
    assert audit(parse_claims({**doc, "units": ["widgets"]})).claims[0].verdict == "consistent"


def test_hints_stay_in_the_dimension():
    with pytest.raises(UnitError) as exc:
        parse_unit("sesions")
    assert exc.value.fix == "sessions"
    for word in ("furlongs", "warriors"):
        with pytest.raises(UnitError) as exc:
            parse_unit(word)
        assert exc.value.fix not in {"seconds", "s", "sec"}


def _many(n: int) -> dict:
    figs = [{"id": f"d{i}", "value": 10 + i, "unit": "s", "test": f"t{i % 40}"} for i in range(n)]
    figs += [{"id": "reqs", "value": 600, "unit": "requests", "test": "run"}]
    figs += [{"id": "dur", "value": 60, "unit": "s", "test": "run"}]
    return _doc(figs, [{"id": "rate", "expr": "reqs / dur", "stated": 40, "unit": "req/s"}])


def test_the_search_scope_is_bounded_and_nearest_first():
    cf = parse_claims(_many(500))
    s = Search(Figures(cf), cf.claims[0])
    assert len(s.scope) == SCOPE and {"reqs", "dur"} <= s.scope


def test_a_small_file_is_searched_whole():
    cf = parse_claims(_many(10))
    s = Search(Figures(cf), cf.claims[0])
    assert s.scope == set(s.figs.values)


def test_a_big_file_keeps_the_claims_own_reading():
    # 600 / 60 = 10 req/s, stated 40: the x4 is nowhere, but the verdict and its figures stay the claim's
    small, big = (audit(parse_claims(_many(n))).claims[0] for n in (10, 1500))
    assert small.verdict == big.verdict == "discrepancy"
    assert [r.text for r in small.readings] == [r.text for r in big.readings]


def test_text_that_is_no_number_is_not_told_to_lose_its_quotes(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("schema: kvbench-claims/1\nname: t\nfigures:\n  - id: n\n    value: 2,400\n    unit: s\n")
    with pytest.raises(Exception, match="write digits only") as exc:
        load_claims(p)
    assert "quotes" not in str(exc.value)
