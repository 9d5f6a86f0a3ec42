"""The mock's ground truth for a fixed sequence of requests is what it was before its CPU work (#30).

mock_golden.json was recorded from the mock before the tokenizer, block keys and cache were made
cheaper (`python tests/integration/test_mock_golden.py` rewrites it, and must only be run when the
model itself is meant to change). The sequence: four tiers enabled with small G1..G3 (evictions
and cross-tier hits), prompts that share a document (prefix hits shorter than the prompt), text
and chat requests, prompts with punctuation and non-ASCII text (the tokenizer's slow paths), a
reset of G1 and G2 midway, and temperature 0 (the answer's words depend on the prompt's digest).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import aiohttp

from kvbench.mock.api.server import MockServer

GOLDEN = Path(__file__).with_name("mock_golden.json")
FIELDS = ("prompt_tokens", "cached_tokens", "tokens_computed", "tokens_from_tier", "bytes_from_tier")
OVERRIDES = {
    "time_scale": 0.0002,
    "tiers.G1.enabled": True,
    "tiers.G1.capacity_bytes": 1.5e9,
    "tiers.G2.enabled": True,
    "tiers.G2.capacity_bytes": 3.0e9,
    "tiers.G3.enabled": True,
    "tiers.G3.capacity_bytes": 6.0e9,
}


def _texts() -> list[str]:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "kv", "cache", "tier", "block", "x1", "y_2"]
    doc = " ".join(rng.choice(words) for _ in range(6000))
    out = []
    for i in range(10):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(5000, 20000)))
        out.append(f"{doc} s{i} {body}" if i % 3 == 0 else f"s{i} {body}")
    out.append("Héllo, wörld! " * 900 + "naïve café; done.")  # non-ASCII: the regex path
    out.append("a,b.c;d " * 2500 + "end\x1fsep\ttab\nline")  # punctuation and odd whitespace
    return out


async def _sequence(tmp: Path) -> list[dict[str, Any]]:
    texts = _texts()
    rng = random.Random(11)
    order = [*range(len(texts)), *(rng.randrange(len(texts)) for _ in range(40))]
    gt = tmp / "gt.jsonl"
    answers = []
    async with (
        MockServer("ci", ground_truth=gt, profile_overrides=OVERRIDES) as srv,
        aiohttp.ClientSession() as s,
    ):
        for k, i in enumerate(order):
            if k == 30:
                async with s.post(f"{srv.base_url}/reset_prefix_cache?tiers=G1,G2") as r:
                    assert r.status == 200
            chat = i % 4 == 1
            body: dict[str, Any] = {"model": "m", "max_tokens": 4, "temperature": 0}
            if chat:
                body["messages"] = [
                    {"role": "system", "content": texts[0][:2000]},
                    {"role": "user", "content": texts[i]},
                ]
            else:
                body["prompt"] = texts[i]
            path = "/v1/chat/completions" if chat else "/v1/completions"
            async with s.post(srv.base_url + path, json=body) as r:
                out = await r.json()
                assert r.status == 200, out
            choice = out["choices"][0]
            answers.append(choice["message"]["content"] if chat else choice["text"])
    rows = [json.loads(line) for line in gt.read_text().splitlines()]
    assert len(rows) == len(order)
    return [
        {**{f: row[f] for f in FIELDS}, "answer": hashlib.sha256(a.encode()).hexdigest()[:16]}
        for row, a in zip(rows, answers, strict=True)
    ]


async def test_ground_truth_unchanged_by_the_cpu_work(tmp_path: Path) -> None:
    got = await _sequence(tmp_path)
    want = json.loads(GOLDEN.read_text())
    # the sequence exercises what it claims: hits from several tiers, partial prefix hits, misses
    tiers_hit = {t for row in want for t, n in row["tokens_from_tier"].items() if n}
    assert {"G1", "G2", "G3", "G4"} <= tiers_hit
    assert any(0 < r["cached_tokens"] < r["prompt_tokens"] - 16 for r in want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"request {k}: {g} != {w}"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(asyncio.run(_sequence(Path(d))), indent=1) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
