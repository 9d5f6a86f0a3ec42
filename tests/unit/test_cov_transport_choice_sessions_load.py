"""Which timed transport a target gets (kvbench.client.transport.choose), strict JSON of what json
cannot write, and a sessions run's load rows in the report's Run table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvbench.client.transport import choose, make_transport
from kvbench.report.sessions.load import sessions_load_rows
from kvbench.results.schema import LengthRangeInfo, LoadShape
from kvbench.strict_json import dumps, to_strict


@pytest.mark.parametrize(
    ("kind", "scheme", "env", "want"),
    [
        ("auto", "http", None, "http1"),
        ("auto", "https", None, "aiohttp"),
        ("auto", "http", "aiohttp", "aiohttp"),  # the deprecated alias, honoured under auto only
        ("auto", "http", "http1", "http1"),
        ("http1", "http", "aiohttp", "http1"),
        ("aiohttp", "http", None, "aiohttp"),
        ("aiohttp", "https", None, "aiohttp"),
    ],
)
def test_choose_by_scheme_and_setting(
    monkeypatch, kind: str, scheme: str, env: str | None, want: str
) -> None:
    if env is None:
        monkeypatch.delenv("KVBENCH_CLIENT_HTTP", raising=False)
    else:
        monkeypatch.setenv("KVBENCH_CLIENT_HTTP", env)
    assert choose(kind, scheme) == want


def test_choose_refuses_what_cannot_carry_the_url() -> None:
    with pytest.raises(ValueError, match=r"^target.transport: 'h2' is not one of auto, http1, aiohttp$"):
        choose("h2", "http")
    with pytest.raises(ValueError, match=r"^target.transport: http1 carries http:// only"):
        choose("http1", "https")


def test_make_transport_builds_the_named_one() -> None:
    from kvbench.client.transport.aiohttp import AiohttpTransport
    from kvbench.client.transport.http1 import Http1Transport

    assert isinstance(make_transport("http1", 4, 1.0), Http1Transport)
    assert isinstance(make_transport("aiohttp", 4, 1.0), AiohttpTransport)


# --- strict JSON ---------------------------------------------------------------------------------


def test_to_strict_cleans_every_container_and_scalar_kind() -> None:
    shape = LoadShape(kind="concurrent", concurrency=2, prompt_count=1, lengths=[10], max_tokens=4)
    got = to_strict(
        {1: (math.nan, 2.5), "s": {math.inf}, "np": np.float64("nan"), "i": np.int64(7), "m": shape, "t": "x"}
    )
    assert got == {
        "1": [None, 2.5],
        "s": [None],
        "np": None,
        "i": 7,
        "m": shape.model_dump(mode="json"),
        "t": "x",
    }


def test_dumps_writes_paths_sets_models_and_numpy_and_cleans_only_when_needed() -> None:
    shape = LoadShape(kind="rate", concurrency=1, rate=0.5, prompt_count=1, lengths=[10], max_tokens=4)
    text = dumps({"p": Path("/r/x"), "t": (1, 2), "f": frozenset({3}), "m": shape, "n": np.int32(5)})
    assert json.loads(text) == {
        "p": "/r/x",
        "t": [1, 2],
        "f": [3],
        "m": shape.model_dump(mode="json"),
        "n": 5,
    }
    # a non-finite value anywhere: the slow path gives null in its place, the rest unchanged
    assert json.loads(dumps({"p": Path("a"), "v": [np.float32("inf"), 1.0]})) == {"p": "a", "v": [None, 1.0]}
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        dumps({"x": object()})


# --- a sessions run's load -----------------------------------------------------------------------


def _load(kind: str, **kw: object) -> LoadShape:
    base: dict[str, object] = {
        "kind": kind,
        "concurrency": 8,
        "requests": 120,
        "prompt_count": 40,
        "lengths": [2048, 256],
        "max_tokens": 128,
    }
    base.update(kw)
    return LoadShape.model_validate(base)


def test_closed_loop_sessions_load_rows() -> None:
    rows = dict(sessions_load_rows(_load("sessions-closed"), source="scenario"))
    assert rows["load"] == (
        "sessions of 40 users: 8 users at once, the next starting as one finishes (closed loop) "
        "(from scenario)"
    )
    assert rows["users"] == "40" and rows["turns planned per phase"] == "120"
    assert rows["first-turn tokens"] == "2,048 (system prompt + first message)"
    assert rows["tokens added per later turn"] == "256 plus the previous answer"
    assert rows["output tokens per turn (most)"] == "128"


def test_open_loop_with_one_length_range() -> None:
    rows = sessions_load_rows(
        _load("sessions-open", rate=0.5, lengths=LengthRangeInfo(min=1000, max=3000, distribution="uniform"))
    )
    got = dict(rows)
    assert "users arrive at 0.500/s, at most 8 at once (open loop) (from manifest load)" in got["load"]
    assert got["first-turn tokens"].startswith("1,000 ")
    assert "tokens added per later turn" not in got


def test_an_older_manifest_says_its_load_is_the_probe() -> None:
    ((key, text),) = sessions_load_rows(_load("sequential", prompt_count=1))
    assert key == "load" and "its load (sequential, 1 prompt(s)) is the run's probe" in text
    ((_, none),) = sessions_load_rows(None)
    assert none == "users and turns not recorded in this manifest; see the per-turn table"
    ((_, empty),) = sessions_load_rows(_load("sessions-closed", lengths=[]))[3:4]
    assert empty == "n/a"
