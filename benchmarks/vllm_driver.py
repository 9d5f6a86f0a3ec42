"""Runs `vllm bench serve` jobs for `make bench`, INSIDE vLLM's own venv, one process for all jobs.

Why one process: importing vLLM takes ~20 s here, longer than a job. The bench starts this
once (pinned to the client's core) and sends one JSON job per stdin line; each job is
vLLM's own `vllm bench serve` code path (vllm.benchmarks.serve.main with its own parser),
random dataset, --save-detailed. The CPU of the request phase alone is the rusage delta
around vllm.benchmarks.serve.benchmark (prompt sampling excluded); peak RSS is the whole
process's (imports included), as for every tool in the table. One JSON answer per line.

    <vllm venv>/bin/python benchmarks/vllm_driver.py TOKENIZER_DIR
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = sys.argv[1]
    # answers go to the real stdout; everything vLLM prints goes to stderr (the driver's log)
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import vllm
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spent: dict[str, float] = {}
    original = serve.benchmark

    async def timed(*args: Any, **kwargs: Any) -> Any:
        c0, t0 = cpu_s(), time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            spent["cpu_s"], spent["wall_s"] = cpu_s() - c0, time.perf_counter() - t0

    serve.benchmark = timed
    answers.write(json.dumps({"ready": True, "vllm": vllm.__version__}) + "\n")
    answers.flush()
    for line in sys.stdin:
        job = json.loads(line)
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        serve.add_cli_args(parser)
        argv = [
            "--backend", "openai", "--base-url", job["base_url"], "--endpoint", "/v1/completions",
            "--model", job.get("model", "kvbench-bench-gt"), "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(job.get("input_len", 1000)),
            "--random-output-len", str(job.get("output_len", 16)), "--num-prompts", str(job["requests"]),
            "--max-concurrency", str(job["concurrency"]), "--request-rate", "inf", "--ignore-eos",
            "--ready-check-timeout-sec", "0", "--num-warmups", "0", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", job["out_dir"],
            "--result-filename", "result.json", "--request-id-prefix", job["prefix"],
            "--seed", str(job.get("seed", 0)),
        ]  # fmt: skip
        spent.clear()
        out: dict[str, Any] = {}
        try:
            serve.main(parser.parse_args(argv))
        except BaseException as exc:  # a failed job is an answer, not the end of the driver
            out["error"] = f"{type(exc).__name__}: {exc}"
        out.update(spent)
        out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        answers.write(json.dumps(out) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
