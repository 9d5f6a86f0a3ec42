"""Every dataset format runs on the embedded mock from its fixture: the throughput test sends the
dataset's prompts (TEXT as written after the run's salt, LENGTHS token-exact), asks each request's
own answer length, starts from a verified cold cache, and dataset.jsonl's expected reuse in the
mock's blocks is what the mock reported; a LENGTHS dataset also replays as a trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.datasets import open_dataset
from kvbench.results import read_jsonl

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"
SMALL = ["--mock-profile", "ci", "--no-report", "--quiet"]
CASES = {
    "custom": "custom.jsonl",
    "sharegpt": "sharegpt.json",
    "random": "random.json",
    "prefix_repetition": "prefix_repetition.json",
    "single_turn": "single_turn.jsonl",
    "multi_turn": "multi_turn.jsonl",
    "mooncake_trace": "mooncake_hash_ids.jsonl",
}


def kvbench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`kvbench ARGS` in this process (main(): the one-line errors and their exit codes)."""
    argv = sys.argv
    sys.argv = ["kvbench", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    def go(*args: str) -> Path:
        code, out = kvbench(capsys, "run", *args, *SMALL, "--output-dir", str(tmp_path))
        assert code == 0, out
        (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "datasets"]
        return run_dir

    return go


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_format_runs_on_the_mock(run, name: str) -> None:
    path = FIXTURES / CASES[name]
    ds = open_dataset(path)
    assert ds.format.name == name  # detected, not named
    requests = 2 * len(ds.requests)
    run_dir = run("throughput", "--dataset", str(path), "--requests", str(requests), "--concurrency", "1")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cold_start"]["verified"] is True
    sent = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] == "cached"]
    rows = read_jsonl(run_dir / "dataset.jsonl")
    assert len(sent) == len(rows) == requests and all(r["status"] == "ok" for r in sent)
    assert [r["prompt_id"] for r in sent] == [r["prompt_id"] for r in rows]  # one row per request, in order
    for req, row in zip(sent, rows, strict=True):
        source = ds.requests[row["prompt_id"]]
        assert row["line"] == source.line and row["format"] == name
        assert req["prompt_tokens_server"] == row["prompt_tokens"]  # the prompt is as long as counted
        if source.input_tokens is not None:
            assert req["prompt_tokens_server"] == source.input_tokens  # token-exact, salt included
            assert req["cached_tokens"] == row["engine_expected_tokens"]  # the expected reuse, exactly
        want = source.output_tokens if source.reply is None else row["output_tokens"]
        if want is not None:
            assert req["output_tokens"] == want  # the request's own answer length
    first = min(sent, key=lambda r: r["sent_ns"])
    assert first["cached_tokens"] == 0  # the salt: nothing of an earlier run, nothing from the probe


def test_sharegpt_answer_length_is_the_recorded_reply(run) -> None:
    from kvbench.mock.tokenizer import count_tokens

    path = FIXTURES / "sharegpt.json"
    run_dir = run("throughput", "--dataset", str(path), "--requests", "6")
    replies = [r.reply for r in open_dataset(path).requests]
    assert len(replies) == 3  # the one-turn entry is skipped, as vLLM skips it
    for row in read_jsonl(run_dir / "dataset.jsonl"):
        # the mock's /tokenize counted the reply: its tokens are the answer length asked for
        assert row["output_tokens"] == count_tokens(replies[row["prompt_id"]] or "")


@pytest.mark.parametrize("fixture", ["mooncake_hash_ids.jsonl", "prefix_repetition.json"])
def test_lengths_dataset_replays_as_a_trace(run, fixture: str) -> None:
    ds = open_dataset(FIXTURES / fixture)
    run_dir = run(
        "replay",
        "--dataset",
        str(FIXTURES / fixture),
        "--set",
        "test.schedule=concurrent",
        "--set",
        "test.concurrency=1",
    )
    rows = sorted(read_jsonl(run_dir / "replay.jsonl"), key=lambda r: r["index"])
    reqs = {r["request_id"]: r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] == "replay"}
    assert [r["input_length"] for r in rows] == [q.input_tokens for q in ds.requests]
    assert [reqs[r["request_id"]]["prompt_tokens_server"] for r in rows] == [
        q.input_tokens for q in ds.requests
    ]
    assert [reqs[r["request_id"]]["cached_tokens"] for r in rows] == [
        r["engine_expected_tokens"] for r in rows
    ]
    assert rows[0]["expected_cached_tokens"] == 0 and sum(r["engine_expected_tokens"] for r in rows) > 0
    assert json.loads((run_dir / "manifest.json").read_text())["cold_start"]["verified"] is True


def test_text_dataset_is_refused_by_replay_in_one_line(tmp_path: Path, capsys) -> None:
    code, out = kvbench(
        capsys, "run", "replay", "--dataset", str(FIXTURES / "custom.jsonl"), "--output-dir", str(tmp_path)
    )
    assert code == 2
    assert out.strip() == (
        f"kvbench: {FIXTURES / 'custom.jsonl'}:1: custom: a replay needs lengths or hash ids, and this "
        "request is text; send text datasets with `kvbench run throughput --dataset`"
    )


def test_bad_dataset_is_one_line_before_anything_starts(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    out_dir = tmp_path / "out"
    code, out = kvbench(capsys, "run", "throughput", "--dataset", str(bad), "--output-dir", str(out_dir))
    assert (code, out.strip()) == (2, f"kvbench: {bad}:2: prompt: must be non-empty text, got 3")
    assert not out_dir.exists()  # refused before a server or a run directory


# A dataset request over the model's context, under prompts.over_context (the replay's ContextFit).
CONTEXT = 4096
LONG = [(1000, 8), (9000, 8), (1500, 8), (800, CONTEXT + 10)]  # over; fits; the answer fills it


def _over_context(tmp_path: Path) -> Path:
    path = tmp_path / "datasets" / "long.jsonl"
    path.parent.mkdir(exist_ok=True)
    rows = [{"timestamp": 10 * i, "input_length": n, "output_length": out,
             "hash_ids": [100 * i + b for b in range(-(-n // 512))]}
            for i, (n, out) in enumerate(LONG)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _dataset_run(tmp_path: Path, capsys, path: Path, policy: str) -> tuple[int, str]:
    return kvbench(
        capsys, "run", "throughput", "--dataset", str(path), "--concurrency", "1",
        "--set", f"target.max_model_len={CONTEXT}", "--set", f"prompts.over_context={policy}",
        "--set", "prompts.lengths=[64]", "--set", "output.max_tokens=8",
        "--mock-profile", "ci", "--no-report", "--output-dir", str(tmp_path / "out"),
    )  # fmt: skip


def _sent(tmp_path: Path) -> tuple[dict, list[dict]]:
    (run_dir,) = (tmp_path / "out").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    sent = [r for r in read_jsonl(run_dir / "requests.jsonl") if r["phase"] == "cached"]
    return manifest, sent


def test_dataset_over_context_fails_naming_the_line_and_the_option(tmp_path: Path, capsys) -> None:
    path = _over_context(tmp_path)
    code, out = _dataset_run(tmp_path, capsys, path, "fail")
    assert code == 2
    (line,) = [x for x in out.splitlines() if x.startswith("kvbench: ")]  # the one error line
    assert f"{path}:2: input_length: 9000 + 8 answer tokens exceeds the model's context {CONTEXT}" in line
    assert "prompts.over_context=skip or clip" in line and "Traceback" not in out


def test_dataset_over_context_skip_sends_the_rest_and_counts_it(tmp_path: Path, capsys) -> None:
    code, out = _dataset_run(tmp_path, capsys, _over_context(tmp_path), "skip")
    assert code == 0, out
    manifest, sent = _sent(tmp_path)
    assert manifest["prompts"]["context"] == {
        "policy": "skip", "max_model_len": CONTEXT, "skipped": 2, "clipped": 0,
        "skipped_why": {"over the context": 2},
    }  # fmt: skip
    assert manifest["prompts"]["count"] == 2 and manifest["prompts"]["role"] == "load"
    assert sorted({r["prompt_tokens_server"] for r in sent}) == [1000, 1500]  # nothing over the context
    load = manifest["load"]  # the dataset's prompts as sent, not prompts.lengths
    assert load["prompt_count"] == 2 and load["lengths"] == {
        "min": 1000,
        "max": 1500,
        "distribution": "dataset",
    }
    assert "dataset: 2 row(s) skipped (2 over the context), 0 clipped" in out
    assert "(prompts.over_context=skip)" in out


def test_dataset_over_context_clip_cuts_a_lengths_prompt_to_fit(tmp_path: Path, capsys) -> None:
    code, out = _dataset_run(tmp_path, capsys, _over_context(tmp_path), "clip")
    assert code == 0, out
    manifest, sent = _sent(tmp_path)
    ctx = manifest["prompts"]["context"]
    assert (ctx["skipped"], ctx["clipped"]) == (1, 1)
    assert ctx["skipped_why"] == {"answer alone fills the context": 1}
    assert sorted({r["prompt_tokens_server"] for r in sent}) == [1000, 1500, CONTEXT - 8]  # token-exact clip
    (run_dir,) = (tmp_path / "out").iterdir()
    clipped = [r for r in read_jsonl(run_dir / "dataset.jsonl") if r["line"] == 2]
    assert clipped and all(r["blocks"] == -(-(CONTEXT - 8) // 512) for r in clipped)


def test_dataset_text_over_context_is_skipped_under_clip_with_its_reason(tmp_path: Path, capsys) -> None:
    path = tmp_path / "datasets" / "text.jsonl"
    path.parent.mkdir(exist_ok=True)
    long = " ".join(["river"] * (CONTEXT + 100))
    rows = [{"prompt": "Name three rivers.", "output_tokens": 8}, {"prompt": long, "output_tokens": 8}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out = _dataset_run(tmp_path, capsys, path, "clip")
    assert code == 0, out
    manifest, sent = _sent(tmp_path)
    ctx = manifest["prompts"]["context"]
    assert (ctx["skipped"], ctx["clipped"]) == (1, 0)
    assert ctx["skipped_why"] == {"text prompt, sent as written (clip cuts only length-built prompts)": 1}
    assert sent and all(r["prompt_tokens_server"] < 100 for r in sent)
