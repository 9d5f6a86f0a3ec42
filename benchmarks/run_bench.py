"""`make bench`: how much the client adds to what it measures, kvbench and its peers side by side.

Every measurement runs against benchmarks/gt_server.py, a ground-truth server that stamps when
each request arrived (the kernel's receive stamp of the read that completed it) and when its
first token left (just after the write). In the same sitting, on the same server, with server
and client pinned to different cores:

  kvbench          the real `kvbench run` CLI (scenarios/ttft_error.yaml, --no-report --quiet),
                   kernel receive and send stamps (TTFT kernel to kernel)
  kvbench (rx)     the same with KVBENCH_TX_STAMPS=0: kernel receive stamps only, the send the
                   loop's stamp before connect and write (kvbench before #30: "today's" figures)
  kvbench (user)   with KVBENCH_KERNEL_STAMPS=0: the loop's own transport and stamps (before #18)
  vLLM bench serve vLLM's `bench serve` from the vLLM CPU venv (benchmarks/vllm_driver.py)
  aiohttp client   a plain aiohttp streaming client (benchmarks/aiohttp_client.py)
  AIPerf           `aiperf profile` from its own venv, made on first use (benchmarks/aiperf_driver.py);
                   without it (no index to install from) the bench says why in one line, no column

Cases (each repeated --repeats times, tools interleaved, median reported):
  ttft        28 connections, 200 requests, 50 ms server TTFT, 16 tokens 1 ms apart
  itl10       the same with tokens 10 ms apart (closer to a real engine's pace)
  capacity    64 connections, 0 ms server: completed requests / (last end - first send), CPU per
              request, peak RSS, and the TTFT error at capacity
  load        TTFT error at 1, 28, 64 and 256 connections, server TTFT drawn in 0-5 ms, 16 tokens
              1 ms apart: with kernel stamps the error must not grow with load; and at 256 with
              the tokens written at once (nothing for the kernel to merge into the first read)
  ray         kvbench local and through two Ray load workers (a Ray head started once, on the
              client's core), interleaved: the ttft case (600 requests; also through one worker),
              the same with tokens 10 ms apart, and the capacity case (benchmarks/ray_bench.py)
  workers     kvbench in one process and through 1 and 2 local worker processes (load.workers,
              no cluster), interleaved, at 256 connections (benchmarks/local_workers_bench.py)
  scraper     kvbench without and with the server's /metrics sampled every 0.1 s during the phase,
              interleaved, 28 connections, 50 ms server (benchmarks/scraper_overhead.py)
  kvbench only: cpu (2,000 requests), long prompts, floor, mock cross-check, prompt build, CLI start
  mock_cpu    the mock's own CPU per 120k-token request, cold and cached (benchmarks/mock_cpu.py)

TTFT error = client TTFT (first token - sent) - server TTFT (first token written - received),
matched by request id (bench_common.ttft_errors). CPU per request: kvbench and the aiohttp client
(CPU of the run - CPU of the same command doing 1 request) / (n - 1), from wait4() rusage; vLLM's
bench: CPU of its request phase alone (rusage around vllm.benchmarks.serve.benchmark) / n.
Peak RSS: each process's whole ru_maxrss, imports included.

    .venv/bin/python benchmarks/run_bench.py [--repeats 3] [--no-peers] [--only ttft,capacity,load,...]

On a bigger box, give the client a core per load worker: `--server-cores 0 --client-cores 1-5
--workers 1,2,4 --pin-workers` (benchmarks/results/local_workers_16core.md was made so).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiperf_driver import aiperf_bin, run_aiperf, version_line
from before_rule import RULE_REPEATS, rule_case
from bench_common import (
    HERE,
    PY,
    ROOT,
    completed_rate,
    core_plan,
    cpu_model,
    fmt,
    kvbench_rows,
    log,
    med,
    median_dict,
    pinned,
    read_jsonl,
    run_kvbench,
    server,
    spawn,
    time_weighted_in_flight,
    ttft_errors,
    uvloop_available,
)
from bench_report import markdown, summary
from local_workers_bench import LOCAL_WORKERS, configure, local_sets, lw_cases, lw_markdown, lw_summary
from mock_cpu import markdown as mock_cpu_markdown
from mock_cpu import mock_cpu_case
from peers import VLLMBench, run_aiohttp, vllm_python, write_tokenizer
from ray_bench import (
    RAY_ONE,
    RAY_TOOL,
    RAY_WORKERS,
    ray_head,
    ray_installed,
    ray_sets,
    ray_summary,
    worker_cpu_s,
)
from scraper_overhead import SCRAPER_TOOLS, scraper_case, scraper_markdown, scraper_sets, scraper_summary

from kvbench.strict_json import dumps as strict_dumps

RESULTS = HERE / "results"
LOAD_LEVELS = {1: 100, 28: 600, 64: 1200, 256: 2000}  # connections: requests
KVBENCH_TOOLS = ("kvbench", "kvbench_rx", "kvbench_user")
BEFORE = "kvbench_before"  # kvbench as it was before #30 (--before-rev), in the rule case only
BEFORE_REV = "9d75495"  # the last commit before kernel-stamped sends (#30's "today")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="kvbench-bench-"))
        self.server_cores, self.client_cores = core_plan(args.server_cores, args.client_cores)
        self.n = 0
        self.vllm: VLLMBench | None = None
        self.tools: list[str] = list(KVBENCH_TOOLS)
        self.base: dict[str, dict[str, float]] = {}
        self.ray_env: dict[str, str] | None = None  # set while the bench's Ray head is up
        self.aiperf: Path | None = None  # AIPerf's executable, where it installed
        self.aiperf_version = ""
        self.before: Path | None = None  # that commit's kvbench/, extracted (before_checkout)

    def before_checkout(self, rev: str, src: str = "") -> str | None:
        """Extract `rev`'s kvbench package to run it beside today's (or take `src`, a folder holding
        that kvbench/, where there is no git history); None, or why it cannot."""
        if src:
            if not (Path(src) / "kvbench" / "cli.py").exists():
                return f"--before-src {src}: no kvbench/cli.py there"
            self.before = Path(src).resolve()
            return None
        out = self.tmp / "before"
        out.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "kvbench"], capture_output=True, check=False
        )
        if archive.returncode != 0:
            return f"kvbench at {rev} not in this checkout's history: {archive.stderr.decode()[:200]}"
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
        self.before = out
        return None

    def _dir(self, name: str) -> Path:
        self.n += 1
        d = self.tmp / f"{self.n:03d}-{name}"
        d.mkdir()
        return d

    # -- one run of one tool ---------------------------------------------------------------------------

    def run_tool(
        self, tool: str, name: str, requests: int, conc: int, sets: dict[str, Any] | None = None, **srv: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One run of `tool` against a fresh ground-truth server: (run with common rows, ground truth)."""
        d = self._dir(f"{name}-{tool}")
        gt_path = d / "ground_truth.jsonl"
        with server("gt", self.server_cores, gt_path, **srv) as url:
            if tool in (*KVBENCH_TOOLS, BEFORE, *RAY_WORKERS, *LOCAL_WORKERS, *SCRAPER_TOOLS):
                allsets = {"load.concurrency": conc, "load.requests": requests, **(sets or {})}
                if tool in RAY_WORKERS:
                    allsets.update(ray_sets(tool))
                if tool in LOCAL_WORKERS:
                    allsets.update(local_sets(tool))
                if tool in SCRAPER_TOOLS:
                    allsets.update(scraper_sets(tool))
                run = run_kvbench(
                    url,
                    d / "runs",
                    self.client_cores,
                    allsets,
                    self.args.no_uvloop,
                    self.args.client_http,
                    kernel_stamps=tool != "kvbench_user",
                    env_extra=self.ray_env if tool in RAY_WORKERS else None,
                    tx_stamps=tool != "kvbench_rx",
                    source=self.before if tool == BEFORE and self.before is not None else ROOT,
                )
                run["common"] = kvbench_rows(run)
                run["clock_source"] = run["manifest"].get("clock_source", "user")
                run["worker_cpu_s"] = worker_cpu_s(run["manifest"])
            elif tool == "aiohttp":
                run = run_aiohttp(url, requests, conc, d, self.client_cores)
                run["common"] = run.pop("rows")
            elif tool == "aiperf":
                assert self.aiperf is not None
                tok = write_tokenizer(self.tmp / "aiperf-tokenizer")
                run = run_aiperf(self.aiperf, url, requests, conc, d, self.client_cores, tok)
                run["common"] = run.pop("rows")
            else:
                assert self.vllm is not None
                run = self.vllm.run(url, requests, conc, d / "vllm")
                run["common"] = run.pop("rows")
        return run, read_jsonl(gt_path)

    def cpu_per_request(self, tool: str, run: dict[str, Any], n: int) -> float:
        """ms of client CPU per request; through Ray: the driver's and its workers' (ray_bench.py)."""
        if tool == "vllm":
            return float(run["cpu_s"]) / max(n, 1) * 1e3
        driver = (run["cpu_s"] - self.base[tool]["cpu_s"]) / max(n - 1, 1) * 1e3
        if tool in LOCAL_WORKERS:  # its rusage holds its workers' CPU: it reaps them (local_workers_bench)
            return driver
        return driver + run.get("worker_cpu_s", 0.0) / max(n, 1) * 1e3

    def baselines(self) -> None:
        """Each child-process tool doing 1 request: start-up, imports, teardown (subtracted from CPU)."""
        for tool in [*self.tools, *([BEFORE] if self.before is not None else [])]:
            if tool == "vllm":
                continue
            runs = [self.run_tool(tool, "baseline", 1, 1)[0] for _ in range(self.args.repeats)]
            keys = [k for k in ("cpu_s", "user_s", "sys_s", "maxrss_mb") if k in runs[0]]
            self.base[tool] = {k: med([r[k] for r in runs]) for k in keys}
            log(f"baseline {tool} (1 request): cpu {self.base[tool]['cpu_s']:.3f} s")

    def case(
        self, name: str, requests: int, conc: int, tools: tuple[str, ...] = (), repeats: int = 0, **srv: Any
    ) -> dict[str, Any]:
        """Every tool, interleaved, --repeats times: TTFT error, capacity, CPU, RSS per tool (median)."""
        tools = tools or tuple(self.tools)
        reps: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
        for _ in range(repeats or self.args.repeats):
            for tool in tools:
                run, gt = self.run_tool(tool, name, requests, conc, **srv)
                res = ttft_errors(run["common"], gt, conc)
                res["req_s"] = completed_rate(run["common"])
                res["cpu_ms_per_request"] = self.cpu_per_request(tool, run, requests)
                res["peak_rss_mb"] = run["maxrss_mb"]
                res["clock_source"] = run.get("clock_source", "user")
                if tool in RAY_WORKERS or tool in LOCAL_WORKERS:
                    workers = run["worker_cpu_s"] / max(requests, 1) * 1e3
                    res["worker_cpu_ms_per_request"] = workers
                    res["driver_cpu_ms_per_request"] = res["cpu_ms_per_request"] - workers
                reps[tool].append(res)
        out = {t: {"median": median_dict(r), "runs": r} for t, r in reps.items()}
        for t in tools:
            log(f"{name} {t}: {_brief(out[t]['median'])}")
        return out

    def ray_cases(self, capacity_requests: int) -> dict[str, Any]:
        """kvbench local and through two Ray load workers, interleaved, under one Ray head (#15)."""
        out: dict[str, Any] = {}
        with ray_head(self.client_cores) as env:
            self.ray_env = env
            try:
                for tool in RAY_WORKERS:
                    runs = [self.run_tool(tool, "baseline", 1, 1)[0] for _ in range(self.args.repeats)]
                    self.base[tool] = {k: med([r[k] for r in runs]) for k in ("cpu_s", "user_s", "sys_s")}
                    log(f"baseline {tool} (1 request): driver cpu {self.base[tool]['cpu_s']:.3f} s")
                pair = ("kvbench", RAY_TOOL)
                # a p99 over 572 requests, median of at least 5 pairs: the difference is what is scored
                reps = max(self.args.repeats, 5)
                three = (*pair, RAY_ONE)
                out["ray_ttft"] = self.case("ray-ttft", 600, 28, three, reps, ttft_ms=50.0, decode_ms=1.0)
                # tokens 10 ms apart (a real engine's pace): a worker's late read no longer takes the
                # next token's stamp (kernel merge), so what is left is what the Ray path itself adds
                out["ray_itl10"] = self.case("ray-itl10", 600, 28, pair, reps, ttft_ms=50.0, decode_ms=10.0)
                out["ray_capacity"] = self.case(
                    "ray-capacity", capacity_requests, 64, pair, ttft_ms=0.0, decode_ms=0.0
                )
            finally:
                self.ray_env = None
        return out

    # -- kvbench only (the measurements the bench had before peers) ------------------------------------

    def kvbench_only(
        self, name: str, sets: dict[str, Any], requests: int, conc: int, tool: str = "kvbench"
    ) -> dict[str, Any]:
        reps = []
        for _ in range(self.args.repeats):
            run, gt = self.run_tool(tool, name, requests, conc, sets)
            res = ttft_errors(run["common"], gt, conc)
            n = len(run["rows"])
            base = self.base[tool]
            for key, field in (("cpu", "cpu_s"), ("user", "user_s"), ("sys", "sys_s")):
                res[f"{key}_ms_per_request"] = (run[field] - base[field]) / max(n - 1, 1) * 1e3
            res["peak_rss_mb"] = run["maxrss_mb"]
            reps.append(res)
        return {"median": median_dict(reps), "runs": reps}

    def floor(self) -> dict[str, Any]:
        """benchmarks/min_client.py (no parsing, no records) against the same server: the in-flight floor."""
        reps = []
        for _ in range(self.args.repeats):
            d = self._dir("floor")
            with server("gt", self.server_cores, d / "gt.jsonl") as url:
                cmd = [PY, str(HERE / "min_client.py"), url, "200", "28"]
                subprocess.run(pinned(cmd, self.client_cores), check=True, cwd=ROOT)
            gt = read_jsonl(d / "gt.jsonl")
            arrivals = sorted(gt, key=lambda g: g["received_ns"])[28:-28]
            reps.append(
                {
                    "in_flight_mean": statistics.fmean(g["in_flight_at_receive"] for g in arrivals),
                    "in_flight_time_avg": time_weighted_in_flight(gt, arrivals),
                }
            )
        return median_dict(reps)

    def mock_crosscheck(self) -> dict[str, Any]:
        d = self._dir("mock-ttft")
        gt_path = d / "ground_truth.jsonl"
        with server("mock", self.server_cores, gt_path) as url:
            run = run_kvbench(
                url, d / "runs", self.client_cores, {}, self.args.no_uvloop, self.args.client_http
            )
        return ttft_errors(kvbench_rows(run), read_jsonl(gt_path), 28)

    def prompt_build(self) -> dict[str, Any]:
        d = self._dir("prompt-build")
        times = []
        info: dict[str, Any] = {}
        for _ in range(self.args.repeats):
            with server("mock", self.server_cores, d / "gt.jsonl") as url:
                cmd = [PY, str(HERE / "prompt_build.py"), url, str(self.args.build_prompts), "130000"]
                out = subprocess.run(
                    pinned(cmd, self.client_cores), capture_output=True, text=True, cwd=ROOT, check=True
                )
            info = json.loads(out.stdout.strip().splitlines()[-1])
            times.append(info["build_s"])
        return {"build_s": med(times), "runs_s": times, **{k: v for k, v in info.items() if k != "build_s"}}

    def cli_help(self) -> dict[str, Any]:
        kvbench = str(Path(PY).parent / "kvbench")
        cmd = [kvbench, "--help"] if Path(kvbench).exists() else [PY, "-m", "kvbench", "--help"]
        times = []
        subprocess.run(pinned(cmd, self.client_cores), capture_output=True, check=True)  # warm the page cache
        for _ in range(max(5, self.args.repeats)):
            t0 = time.perf_counter()
            subprocess.run(pinned(cmd, self.client_cores), capture_output=True, check=True)
            times.append(time.perf_counter() - t0)
        return {"median_s": med(times), "runs_s": times}


def _brief(m: dict[str, Any]) -> str:
    keys = (
        "n",
        "error_mean_ms",
        "error_p99_ms",
        "return_p99_ms",
        "lag_p99_ms",
        "req_s",
        "cpu_ms_per_request",
    )
    return fmt({k: m[k] for k in keys if k in m})


def versions(vllm: VLLMBench | None) -> dict[str, str]:
    out = {"python": sys.version.split()[0], "kernel": platform.release()}
    for mod in ("aiohttp", "uvloop"):
        r = subprocess.run(
            [PY, "-c", f"import {mod}; print({mod}.__version__)"], capture_output=True, text=True
        )
        out[mod] = r.stdout.strip() or "absent"
    r = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    out["kvbench_commit"] = r.stdout.strip() or "?"
    if vllm is not None:
        out["vllm"] = vllm.version
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="kvbench harness-overhead benchmark, peers side by side")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-uvloop", action="store_true", help="hide uvloop from the kvbench child")
    ap.add_argument("--client-http", choices=["raw", "aiohttp"], default="raw", help="KVBENCH_CLIENT_HTTP")
    ap.add_argument("--no-peers", action="store_true", help="skip vLLM bench serve and the aiohttp client")
    ap.add_argument("--capacity-requests", type=int, default=3000)
    ap.add_argument("--cpu-requests", type=int, default=2000)
    ap.add_argument("--build-prompts", type=int, default=100)
    ap.add_argument(
        "--only",
        default="",
        help="comma list of: ttft,capacity,rule,itl10,load,cpu,long,floor,mock,mock_cpu,build,cli,ray,"
        "workers,scraper",
    )
    ap.add_argument("--out", default=str(RESULTS / "latest"), help="output prefix (.json, .md added)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir of run directories")
    ap.add_argument("--note", default="", help="a line for the report (e.g. what else ran on the machine)")
    ap.add_argument(
        "--before-rev",
        default=BEFORE_REV,
        help=f"the commit whose kvbench the rule case runs beside today's (#30; {BEFORE_REV}; '' none)",
    )
    ap.add_argument(
        "--before-src", default="", help="a folder holding --before-rev's kvbench/ (no git history here)"
    )
    ap.add_argument("--server-cores", default="", help="the server's cores, e.g. 0 (default: the first core)")
    ap.add_argument(
        "--client-cores", default="", help="the client's cores, e.g. 1-3 (default: the second core)"
    )
    ap.add_argument(
        "--workers", default="1,2", help="local worker counts the workers case compares (default 1,2)"
    )
    ap.add_argument(
        "--pin-workers",
        action="store_true",
        help="load.pin: each local worker on a client core of its own (give --client-cores K+1 cores)",
    )
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    configure([int(k) for k in args.workers.split(",") if k.strip()], args.pin_workers)
    every = {"ttft", "capacity", "itl10", "load", "cpu", "long", "floor", "mock", "build", "cli", "ray"}
    every.add("rule")  # #30: capacity and CPU against kvbench before #30, paired (before_rule.py)
    every.add("mock_cpu")
    every.add("workers")  # 1 and 2 local worker processes at 256 connections (local_workers_bench.py)
    every.add("scraper")  # /metrics sampled at 0.1 s vs not, interleaved (scraper_overhead.py)
    only = set(filter(None, args.only.split(","))) or every
    spawn([sys.executable, "-c", "pass"], Path(os.devnull), dict(os.environ))  # start it while small
    b = Bench(args)
    t_start = time.perf_counter()
    peers_note = "skipped (--no-peers)"
    res: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "repeats": args.repeats,
    }
    res["note"] = args.note
    try:
        if not args.no_peers and only & {"ttft", "capacity", "itl10", "load"}:
            b.tools.append("aiohttp")
            vpy, peers_note = vllm_python()
            if vpy is not None:
                t0 = time.perf_counter()
                try:
                    b.vllm = VLLMBench(vpy, b.tmp, b.client_cores)
                    b.tools.append("vllm")
                    log(f"vLLM {b.vllm.version} driver ready in {time.perf_counter() - t0:.0f} s")
                except RuntimeError as exc:
                    peers_note = f"vLLM bench serve did not start: {str(exc).splitlines()[-1][:200]}"
            if b.vllm is None:
                log(peers_note)
            b.aiperf, aiperf_note = aiperf_bin()
            if b.aiperf is not None:
                b.tools.append("aiperf")
                b.aiperf_version = version_line(b.aiperf)
            else:
                log(aiperf_note)  # the one line saying why its column is missing
            res["aiperf"] = "ran" if b.aiperf is not None else aiperf_note
        res["machine"] = {
            "nproc": os.cpu_count(),
            "cpu_model": cpu_model(),
            "platform": platform.platform(),
            "server_cores": b.server_cores,
            "client_cores": b.client_cores,
            "uvloop_in_client": uvloop_available() and not args.no_uvloop,
            "client_http": args.client_http,
            "versions": {**versions(b.vllm), **({"aiperf": b.aiperf_version} if b.aiperf else {})},
        }
        res["tools"] = list(b.tools)
        if "rule" in only and args.before_rev:  # #30's rule: capacity and CPU not worse than before
            why = b.before_checkout(args.before_rev, args.before_src)
            res["before"] = {"rev": args.before_rev, "ran": why is None, **({"why": why} if why else {})}
            if why:
                log(why)
        res["peers"] = peers_note if "vllm" not in b.tools else "ran"
        b.baselines()
        res["baseline"] = b.base
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("ttft", lambda: b.case("ttft", 200, 28, ttft_ms=50.0, decode_ms=1.0)),
            (
                "capacity",
                lambda: b.case("capacity", args.capacity_requests, 64, ttft_ms=0.0, decode_ms=0.0),
            ),
            # tokens 10 ms apart (a real engine's pace): a late read finds fewer later tokens merged in
            ("itl10", lambda: b.case("itl10", 200, 28, ttft_ms=50.0, decode_ms=10.0)),
        ]
        for key, fn in steps:
            if key in only:
                res[key] = fn()
        if "rule" in only and b.before is not None:  # paired repeats (benchmarks/before_rule.py)
            res["rule"] = rule_case(b, max(args.repeats, RULE_REPEATS))
        if "load" in only:
            res["load"] = {
                str(c): b.case(f"load-{c}", n, c, ttft_ms=0.0, ttft_ms_max=5.0, decode_ms=1.0)
                for c, n in LOAD_LEVELS.items()
            }
            # the same at 256 with each response's tokens written at once: no later token can be
            # merged into the first one's read, so what is left is the stamp itself
            res["load_burst"] = b.case(
                "load-256-burst", 2000, 256, ttft_ms=0.0, ttft_ms_max=5.0, decode_ms=0.0
            )
        if "cpu" in only:
            res["cpu"] = b.kvbench_only("cpu", {}, args.cpu_requests, 28)
            res["cpu_user"] = b.kvbench_only("cpu", {}, args.cpu_requests, 28, tool="kvbench_user")
            log(f"cpu: {_brief(res['cpu']['median'])}; loop stamps: {_brief(res['cpu_user']['median'])}")
        if "long" in only:
            # one request at a time (the published TTFT test's shape): what a 750 KB body adds
            short = {"prompts.lengths": [1000], "prompts.count": 5}
            res["seq_1k"] = b.kvbench_only("seq-1k", short, 30, 1)
            res["seq_130k"] = b.kvbench_only("seq-130k", {**short, "prompts.lengths": [130000]}, 30, 1)
            res["long_prompt"] = b.kvbench_only(
                "long", {"prompts.lengths": [130000], "prompts.count": 28}, 200, 28
            )
            log(f"long: {_brief(res['long_prompt']['median'])}")
        if "floor" in only:
            res["floor"] = b.floor()
        if "mock" in only:
            res["mock_crosscheck"] = b.mock_crosscheck()
        if "mock_cpu" in only:  # the mock's own CPU per 120k-token request (benchmarks/mock_cpu.py)
            res["mock_cpu"] = mock_cpu_case(args.repeats, b.server_cores)
        if "build" in only:
            res["prompt_build"] = b.prompt_build()
        if "cli" in only:
            res["cli_help"] = b.cli_help()
        if "ray" in only:
            if ray_installed():
                res.update(b.ray_cases(args.capacity_requests))
                res["ray_summary"] = ray_summary(res)
            else:
                log("Ray rows skipped: Ray is not installed (pip install 'kvbench[ray]')")
        if "workers" in only:
            res.update(lw_cases(b, args.capacity_requests))
            res["lw_summary"] = lw_summary(res)
        if "scraper" in only:
            res.update(scraper_case(b))
            res["scraper_summary"] = scraper_summary(res)
    finally:
        if b.vllm is not None:
            b.vllm.close()
        if not args.keep:
            shutil.rmtree(b.tmp, ignore_errors=True)
        else:
            log(f"run directories kept in {b.tmp}")
    res["bench_wall_s"] = time.perf_counter() - t_start
    res["summary"] = summary(res)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # strict JSON (a statistic over no samples is null, never NaN) so jq and readme_table.py read it
    out.with_suffix(".json").write_text(strict_dumps(res, indent=2) + "\n")
    md = markdown(res) + mock_cpu_markdown(res) + lw_markdown(res) + scraper_markdown(res)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
