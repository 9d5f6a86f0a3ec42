"""The run's prompt set (kvbench.run.prompt_set) built against a fake /tokenize, and the requests a
remote load backend is given (kvbench.run.remote.RunPhase), both on a Run made of fakes.

The fake tokenizer adds a BOS token the way servers do, so a length that comes out exact was hit
by counting and adjusting, not by the word count (which is one short)."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

from kvbench.client import ClientConfig
from kvbench.load.prompts import SALT_WORDS
from kvbench.load.schedule import WorkItem
from kvbench.results import read_jsonl, read_manifest
from kvbench.run.context import Run, RunOptions
from kvbench.run.preflight.target import TargetInfo
from kvbench.run.prompt_set import make_prompt_set
from kvbench.run.remote import RunPhase, connect_cluster
from kvbench.run.runner import start_manifest
from kvbench.scenario import Scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def with_bos(text: str) -> int:
    return 1 + len(text.split())


class Tokenizer:
    """POST /tokenize as vLLM answers it (`count`), or 404 where the server has none."""

    def __init__(self, works: bool = True, count=with_bos) -> None:
        self.works, self.count, self.calls = works, count, 0

    async def post_bytes(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        assert path == "/tokenize"
        self.calls += 1
        if not self.works:
            return 404, b'{"detail": "Not Found"}'
        text = payload.get("prompt") or payload["messages"][0]["content"]
        return 200, json.dumps({"count": self.count(text), "max_model_len": 4096}).encode()


class Client:
    def __init__(self) -> None:
        self.cfg = ClientConfig(base_url="http://fake", model="m", max_tokens=7)
        self.user_headers = {"x-team": "kv"}

    def now(self) -> int:
        return 0


class Adapter:
    engine = "generic"
    can_reset = False
    transfer_counters = ()


def scenario(target: dict[str, Any] | None = None, **prompts: Any) -> Scenario:
    data: dict[str, Any] = {
        "target": target or {},
        "name": "ps-cov",
        "test": "throughput",
        "prompts": {"count": 3, "lengths": [200, 350], **prompts},
        "load": {"kind": "concurrent", "concurrency": 2, "requests": 6},
        "telemetry": {"metrics": "off"},
    }
    return Scenario.model_validate(data)


def make_run(tmp_path: Path, scn: Scenario, http: Any, api: str = "completions") -> tuple[Run, list[str]]:
    target = TargetInfo(kind="server", base_url="http://fake", model="m", engine="generic", api=api)
    conn = types.SimpleNamespace(run_path=tmp_path, run_id="20261206T000000Z-ps-abc123", target=target)
    rd = start_manifest(scn, RunOptions(quiet=True), conn, 0)  # type: ignore[arg-type]
    run = Run(scn, RunOptions(quiet=True), rd, target, http, Client(), Adapter(), 0)  # type: ignore[arg-type]
    logged: list[str] = []
    run.progress.log = logged.append  # type: ignore[method-assign]
    return run, logged


async def test_lengths_counted_by_the_server_are_exact_and_written_with_the_set(tmp_path) -> None:
    scn = scenario()
    run, logged = make_run(tmp_path, scn, Tokenizer())
    prompts = await make_prompt_set(run)
    run.rd.save_manifest()
    assert [p.requested_tokens for p in prompts] == [200, 350, 200]  # the list cycles to the count
    # the salt the run adds later is as long as the sample salt the lengths were counted with
    assert all(with_bos("salt " * SALT_WORDS + p.body) == p.requested_tokens for p in prompts)
    assert all(p.actual_tokens == p.requested_tokens and p.count_source == "server" for p in prompts)
    assert len({p.body for p in prompts}) == 3  # same length, different prompt
    rows = read_jsonl(tmp_path / "prompts.jsonl")
    assert [r["prompt_id"] for r in rows] == [0, 1, 2]
    assert [r["chars"] for r in rows] == [len(p.body) for p in prompts]
    info = read_manifest(tmp_path)["prompts"]
    assert (info["count"], info["count_source"], info["outside_tolerance"]) == (3, "server", 0)
    assert info["counted_as"] == "raw text"
    assert logged[-1].startswith("built 3 prompts (750 tokens) in ") and "counted by the server" in logged[-1]
    assert run.token_counter is not None


async def test_without_tokenize_lengths_are_word_estimates_and_the_log_says_so(tmp_path) -> None:
    http = Tokenizer(works=False)
    run, logged = make_run(tmp_path, scenario(salt="none"), http)
    prompts = await make_prompt_set(run)
    assert http.calls >= 1 and run.token_counter is None
    # no salt: the body alone is the prompt, one word per token as estimated
    assert [len(p.body.split()) for p in prompts] == [200, 350, 200]
    assert all(p.count_source == "estimate" for p in prompts)
    assert "estimate (no /tokenize)" in logged[-1]


async def test_lengths_a_tokenizer_cannot_hit_are_counted_outside_tolerance(tmp_path) -> None:
    # every text counts twice its words: an odd length is never hit, whatever the word count
    scn = scenario(lengths=[201, 350], tolerance_tokens=0)
    run, _ = make_run(tmp_path, scn, Tokenizer(count=lambda t: 2 * len(t.split())))
    prompts = await make_prompt_set(run)
    run.rd.save_manifest()
    off = [p.prompt_id for p in prompts if p.actual_tokens != p.requested_tokens]
    assert {0, 2} <= set(off)  # the odd ones cannot be hit by any number of words
    assert read_manifest(tmp_path)["prompts"]["outside_tolerance"] == len(off)


async def test_the_chat_api_says_its_template_is_counted(tmp_path) -> None:
    run, _ = make_run(tmp_path, scenario(target={"api": "chat"}), Tokenizer(), api="chat")
    await make_prompt_set(run)
    run.rd.save_manifest()
    # the fake answers the messages form that chat tries first: it counts with the template
    assert read_manifest(tmp_path)["prompts"]["counted_as"] == "chat message with template"


async def test_a_dataset_replaces_the_lengths_and_keeps_its_source_lines(tmp_path) -> None:
    scn = scenario(dataset=str(FIXTURES / "custom.jsonl"), count=None)
    run, logged = make_run(tmp_path, scn, Tokenizer(works=False))
    prompts = await make_prompt_set(run)
    run.rd.save_manifest()
    source = [json.loads(line) for line in (FIXTURES / "custom.jsonl").read_text().splitlines() if line]
    assert len(prompts) == len(source)
    assert all(s["prompt"] in p.body for p, s in zip(prompts, source, strict=True))
    assert len(read_jsonl(tmp_path / "prompts.jsonl")) == len(source)
    # one dataset row per request the load sends, each naming its prompt's source line
    rows = read_jsonl(tmp_path / "dataset.jsonl")
    assert len(rows) == scn.load.requests and {r["prompt_id"] for r in rows} == set(range(len(source)))
    assert all(r["line"] == r["prompt_id"] + 1 and r["format"] == "custom" for r in rows)
    assert read_manifest(tmp_path)["prompts"]["counted_as"] == "raw text, after the run's salt"
    assert logged[-1].startswith("dataset custom.jsonl (") and f"{len(source)} text prompts" in logged[-1]


# --- the remote phase ---------------------------------------------------------------------------------


async def test_a_remote_phase_prepares_requests_as_run_issue_would(tmp_path) -> None:
    scn = scenario()
    run, _ = make_run(tmp_path, scn, Tokenizer())
    prompts = await make_prompt_set(run)
    phase = RunPhase(
        run, name="cached", label="cached", repetition=1, noisy=True, prompts=prompts, texts=None
    )
    items = [WorkItem(i, i % 3, 0.25 * i) for i in range(4)]
    prepared = [phase.prepare(it) for it in items]
    assert [p.request_id for p in prepared] == [f"abc123-cached-{n}" for n in (1, 2, 3, 4)]
    assert [p.offset_s for p in prepared] == [0.0, 0.25, 0.5, 0.75]
    for p, it in zip(prepared, items, strict=True):
        prompt = prompts[it.prompt_id]
        body = json.loads(p.body)
        assert body["prompt"].endswith(prompt.body) and body["max_tokens"] == 7
        salt = body["prompt"][: -len(prompt.body)].split()
        assert len(salt) == SALT_WORDS  # salted afresh per request
        assert p.fields["prompt_tokens"] == prompt.actual_tokens and p.fields["noise_active"] is True
    # two requests of one prompt never share a salt
    same = [json.loads(p.body)["prompt"] for p, it in zip(prepared, items, strict=True) if it.prompt_id == 0]
    assert len(same) == 2 and same[0] != same[1]
    fixed = RunPhase(
        run, name="fill", label="fill", repetition=0, noisy=False, prompts=prompts, texts=["a", "b", "c"]
    )
    assert json.loads(fixed.prepare(WorkItem(0, 2, 0.0)).body)["prompt"] == "c"
    spec = phase.client_spec()
    assert spec["config"]["base_url"] == "http://fake" and spec["headers"] == {"x-team": "kv"}
    assert spec["concurrency"] == scn.load.max_in_flight
    assert spec["connect_timeout_s"] == scn.target.timeouts.connect_s


async def test_a_remote_phase_records_rows_through_the_run(tmp_path) -> None:
    from kvbench.client import RequestRecord

    run, _ = make_run(tmp_path, scenario(), Tokenizer())
    phase = RunPhase(run, name="cached", label="cached", repetition=0, noisy=False, prompts=[], texts=None)
    phase.started("r1")
    bad = RequestRecord(request_id="r1", phase="cached")
    bad.fail("http_500", "boom")
    phase.record(bad, {"worker": "load-0", "node": "n1"})
    run.rd.close()
    (row,) = read_jsonl(tmp_path / "requests.jsonl")
    assert row["worker"] == "load-0" and row["node"] == "n1" and row["error_type"] == "http_500"
    assert dict(run.error_counts) == {"http_500": 1}


def test_a_local_run_connects_no_cluster() -> None:
    assert connect_cluster(scenario()) is None
