"""`make bench`: how much the kvbench client itself adds to what it measures.

Every measurement runs the real `kvbench run` CLI (scenario benchmarks/scenarios/ttft_error.yaml,
--no-report --quiet, run directories in a temp dir) in a child process against a ground-truth
server that stamps its own receive and first-token times (benchmarks/gt_server.py; the kvbench
mock's fixed-delay profile is used for the /tokenize prompt-building test and as a cross-check).
With two or more cores the server and the client are pinned to different cores.

  TTFT error     client TTFT (first_token_ns - sent_ns) minus the server's (first token written -
                 request received), matched by request_id; split into send (client sent -> server
                 received) and return (server first token -> client first token)
  in flight      the server's in_flight_at_receive, mean over the steady state (the first and last
                 `concurrency` requests by arrival dropped)
  capacity       0 ms server, 64 connections: completed requests / (last end - first send)
  CPU, RSS       os.wait4() rusage of the kvbench child (forked by benchmarks/spawner.py): (CPU of a
                 2,000-request run - CPU of the same command doing 1 request) / 1,999; ru_maxrss
                 as is (the process's whole peak, imports included)
  long prompts   the TTFT error with 130k-token prompts (~750 KB bodies) minus that with 1k, one
                 request at a time (30 each); also shown at 28 connections
  prompt build   100 x 130k-token prompts built and verified against the mock's /tokenize with
                 kvbench.prompts.build_prompts + kvbench.tokenize.server_token_counter, in process
  CLI start-up   wall time of `kvbench --help`

Each is repeated (--repeats, default 3) and the median reported. Writes benchmarks/results/latest.json
and latest.md (or --out PREFIX).

    .venv/bin/python benchmarks/run_bench.py [--repeats 3] [--no-uvloop] [--only ttft,capacity,...]
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
SCENARIO = HERE / "scenarios" / "ttft_error.yaml"
RESULTS = HERE / "results"

TARGETS = {
    "ttft_error_mean_ms": ("<=", 5.0),
    "ttft_error_p99_ms": ("<=", 15.0),
    "in_flight_mean": (">=", 27.0),
    "capacity_req_s": (">=", 2000.0),
    "cpu_ms_per_request": ("<=", 0.5),
    "peak_rss_mb": ("<=", 100.0),
    "long_prompt_extra_error_ms": ("<=", 2.0),
    "prompt_build_s": ("<=", 10.0),
    "cli_help_s": ("<=", 0.3),
}
REFERENCE = {
    "vLLM bench serve 0.33": {
        "ttft_error_mean_ms": 14.8,
        "ttft_error_p99_ms": 26.8,
        "in_flight_mean": 23.4,
        "capacity_req_s": 1065,
        "cpu_ms_per_request": 4.9,
        "peak_rss_mb": 622,
    },
    "a minimal aiohttp client": {
        "ttft_error_mean_ms": 5.5,
        "ttft_error_p99_ms": 14.9,
        "in_flight_mean": 24.2,
        "capacity_req_s": 2094,
        "cpu_ms_per_request": 0.34,
        "peak_rss_mb": 29,
    },
}


# --- machine, cores --------------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def core_plan() -> tuple[list[int] | None, list[int] | None]:
    """(server cores, client cores): different cores where there are two or more."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    return [cores[0]], [cores[1]]


def pinned(cmd: list[str], cores: list[int] | None) -> list[str]:
    """cmd run on `cores`: taskset (util-linux) where installed, else a tiny sched_setaffinity + exec."""
    if cores is None:
        return cmd
    if shutil.which("taskset"):
        return ["taskset", "-c", ",".join(map(str, cores)), *cmd]
    pin = f"import os, sys; os.sched_setaffinity(0, {set(cores)!r}); os.execvp(sys.argv[1], sys.argv[1:])"
    return [PY, "-c", pin, *cmd]


# --- servers ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def server(kind: str, cores: list[int] | None, gt_path: Path, **opts: Any) -> Iterator[str]:
    """Start a ground-truth server ("gt" = benchmarks/gt_server.py, "mock" = kvbench mock fixed-delay)."""
    if kind == "gt":
        cmd = [
            PY,
            str(HERE / "gt_server.py"),
            "--port",
            "0",
            "--announce",
            "--exit-on-stdin-eof",
            "--ttft-ms",
            str(opts.get("ttft_ms", 50.0)),
            "--decode-ms",
            str(opts.get("decode_ms", 1.0)),
            "--ground-truth",
            str(gt_path),
        ]
    else:
        cmd = [
            PY,
            "-m",
            "kvbench.cli",
            "mock",
            "serve",
            "--profile",
            "fixed-delay",
            "--port",
            "0",
            "--announce",
            "--exit-on-stdin-eof",
            "--ground-truth",
            str(gt_path),
            "--set",
            f"ttft_ms={opts.get('ttft_ms', 50.0)}",
            "--set",
            f"decode_ms_per_token={opts.get('decode_ms', 1.0)}",
        ]
        cmd = [PY, "-c", _STUB.format(no_uvloop=False), *cmd[3:]]
    proc = subprocess.Popen(
        pinned(cmd, cores),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{kind} server did not start: {' '.join(cmd)}")
        yield json.loads(line)["base_url"]
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- the kvbench child -----------------------------------------------------------------------------------

_SPAWNER: subprocess.Popen[str] | None = None


def spawn(cmd: list[str], log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run cmd through benchmarks/spawner.py (started while this process is small; see there)."""
    global _SPAWNER
    if _SPAWNER is None:
        _SPAWNER = subprocess.Popen(
            [PY, str(HERE / "spawner.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    assert _SPAWNER.stdin is not None and _SPAWNER.stdout is not None
    _SPAWNER.stdin.write(json.dumps({"cmd": cmd, "log": str(log), "env": env, "cwd": str(ROOT)}) + "\n")
    _SPAWNER.stdin.flush()
    return dict(json.loads(_SPAWNER.stdout.readline()))


_STUB = (
    "import sys\n"
    "if {no_uvloop}: sys.modules['uvloop'] = None\n"
    "from kvbench.cli import main\n"
    "sys.argv[0] = 'kvbench'\n"
    "main()\n"
)


def run_kvbench(
    base_url: str,
    out_dir: Path,
    cores: list[int] | None,
    sets: dict[str, Any],
    no_uvloop: bool,
    client_http: str = "raw",
) -> dict[str, Any]:
    """`kvbench run` in a child process; its rows, manifest, CPU seconds and peak RSS."""
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["run", str(SCENARIO), "--base-url", base_url, "--output-dir", str(out_dir)]
    args += ["--no-report", "--quiet"]
    for k, v in sets.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    cmd = [PY, "-c", _STUB.format(no_uvloop=no_uvloop), *args]
    t0 = time.perf_counter()
    log = out_dir.parent / "kvbench.log"
    env = {**os.environ, "KVBENCH_CLIENT_HTTP": client_http}
    ru = spawn(pinned(cmd, cores), log, env)  # this child's own rusage (CPU, peak RSS)
    rc = ru["rc"]
    wall = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"kvbench run failed ({rc}):\n{log.read_text(errors='replace')[-3000:]}")
    runs = [p for p in out_dir.iterdir() if (p / "manifest.json").exists()]
    if len(runs) != 1:
        raise RuntimeError(f"expected one run directory in {out_dir}, found {len(runs)}")
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    rows = read_jsonl(runs[0] / "requests.jsonl")
    return {
        "rows": rows,
        "manifest": manifest,
        "cpu_s": ru["user_s"] + ru["sys_s"],
        "user_s": ru["user_s"],
        "sys_s": ru["sys_s"],
        "maxrss_mb": ru["maxrss_kb"] / 1024.0,
        "wall_s": wall,
    }


# --- analysis --------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ttft_errors(run: dict[str, Any], gt: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    origin = run["manifest"]["clock_origin_ns"]
    by_id = {g["request_id"]: g for g in gt}
    err, send, ret, unmatched, failed = [], [], [], 0, 0
    for r in run["rows"]:
        if r["phase"] == "probe":
            continue
        if r["status"] != "ok" or r["first_token_ns"] is None:
            failed += 1
            continue
        g = by_id.get(r["request_id"])
        if g is None or g.get("first_token_ns") is None:
            unmatched += 1
            continue
        sent = r["sent_ns"] + origin
        first = r["first_token_ns"] + origin
        server_ttft = g["first_token_ns"] - g["received_ns"]
        client_ttft = first - sent
        err.append((client_ttft - server_ttft) / 1e6)
        send.append((g["received_ns"] - sent) / 1e6)
        ret.append((first - g["first_token_ns"]) / 1e6)
    arrivals = sorted(
        (g for g in gt if g.get("first_token_ns") is not None and g["request_id"] in by_id),
        key=lambda g: g["received_ns"],
    )
    steady = arrivals[concurrency:-concurrency] if len(arrivals) > 2 * concurrency else arrivals
    in_flight = statistics.fmean(g["in_flight_at_receive"] for g in steady) if steady else float("nan")
    time_avg = time_weighted_in_flight(gt, steady)
    return {
        "n": len(err),
        "failed": failed,
        "unmatched": unmatched,
        "error_mean_ms": statistics.fmean(err) if err else float("nan"),
        "error_p50_ms": pct(err, 0.5),
        "error_p99_ms": pct(err, 0.99),
        "send_mean_ms": statistics.fmean(send) if send else float("nan"),
        "send_p50_ms": pct(send, 0.5),
        "send_p99_ms": pct(send, 0.99),
        "return_mean_ms": statistics.fmean(ret) if ret else float("nan"),
        "return_p50_ms": pct(ret, 0.5),
        "return_p99_ms": pct(ret, 0.99),
        "in_flight_mean": in_flight,
        "in_flight_time_avg": time_avg,
    }


def time_weighted_in_flight(gt: list[dict[str, Any]], steady: list[dict[str, Any]]) -> float:
    """Requests the server held, averaged over time across the steady window (Little's law view)."""
    if len(steady) < 2:
        return float("nan")
    t0, t1 = steady[0]["received_ns"], steady[-1]["received_ns"]
    held = 0
    for g in gt:
        if g.get("end_ns") is None:
            continue
        lo, hi = max(g["received_ns"], t0), min(g["end_ns"], t1)
        if hi > lo:
            held += hi - lo
    return held / (t1 - t0)


def completed_rate(run: dict[str, Any]) -> float:
    ok = [r for r in run["rows"] if r["status"] == "ok"]
    if not ok:
        return 0.0
    span = (max(r["end_ns"] for r in ok) - min(r["sent_ns"] for r in ok)) / 1e9
    return len(ok) / span


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def median_dict(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    keys = dicts[0].keys()
    num = {k for k in keys if isinstance(dicts[0][k], int | float)}
    return {k: med([d[k] for d in dicts]) if k in num else dicts[0][k] for k in keys}


# --- measurements ----------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="kvbench-bench-"))
        self.server_cores, self.client_cores = core_plan()
        self.n = 0

    def _dir(self, name: str) -> Path:
        self.n += 1
        return self.tmp / f"{self.n:03d}-{name}"

    def one(
        self, name: str, sets: dict[str, Any], server_kind: str = "gt", **server_opts: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        d = self._dir(name)
        d.mkdir()
        gt_path = d / "ground_truth.jsonl"
        with server(server_kind, self.server_cores, gt_path, **server_opts) as url:
            run = run_kvbench(
                url, d / "runs", self.client_cores, sets, self.args.no_uvloop, self.args.client_http
            )
        return run, read_jsonl(gt_path)

    def baseline_cpu(self) -> dict[str, float]:
        """The same command doing a single request: start-up, imports, prompt building, teardown."""
        runs = [self.one("baseline", {"load.requests": 1})[0] for _ in range(self.args.repeats)]
        return {k: med([r[k] for r in runs]) for k in ("cpu_s", "user_s", "sys_s", "maxrss_mb")}

    def ttft(
        self,
        base: dict[str, float],
        lengths: int = 1000,
        prompts: int = 100,
        concurrency: int = 28,
        requests: int = 200,
    ) -> dict[str, Any]:
        reps = []
        for _ in range(self.args.repeats):
            sets = {
                "prompts.lengths": [lengths],
                "prompts.count": prompts,
                "load.concurrency": concurrency,
                "load.requests": requests,
            }
            run, gt = self.one(f"ttft-{lengths}", sets)
            n_req = len(run["rows"])
            res = ttft_errors(run, gt, concurrency)
            res["cpu_ms_per_request"] = (run["cpu_s"] - base["cpu_s"]) / max(n_req - 1, 1) * 1e3
            res["cpu_s"] = run["cpu_s"]
            res["peak_rss_mb"] = run["maxrss_mb"]
            res["wall_s"] = run["wall_s"]
            reps.append(res)
        return {"median": median_dict(reps), "runs": reps}

    def cpu(self, base: dict[str, float]) -> dict[str, Any]:
        """The TTFT set-up with more requests, so that start-up noise vanishes from CPU per request."""
        reps = []
        n = self.args.cpu_requests
        for _ in range(self.args.repeats):
            run, gt = self.one("cpu", {"load.requests": n})
            res = ttft_errors(run, gt, 28)
            res["cpu_ms_per_request"] = (run["cpu_s"] - base["cpu_s"]) / max(n - 1, 1) * 1e3
            res["user_ms_per_request"] = (run["user_s"] - base["user_s"]) / max(n - 1, 1) * 1e3
            res["sys_ms_per_request"] = (run["sys_s"] - base["sys_s"]) / max(n - 1, 1) * 1e3
            res["peak_rss_mb"] = run["maxrss_mb"]
            reps.append(res)
        return {"median": median_dict(reps), "runs": reps}

    def capacity(self, base: dict[str, float]) -> dict[str, Any]:
        reps = []
        n = self.args.capacity_requests
        for _ in range(self.args.repeats):
            sets = {"load.concurrency": 64, "load.requests": n}
            run, gt = self.one("capacity", sets, ttft_ms=0.0, decode_ms=0.0)
            ok = sum(r["status"] == "ok" for r in run["rows"])
            phase = run["manifest"]["phases"][-1]
            reps.append(
                {
                    "requests": len(run["rows"]),
                    "ok": ok,
                    "req_s": completed_rate(run),
                    "manifest_req_s": phase["requests_ok_per_s"],
                    "cpu_ms_per_request": (run["cpu_s"] - base["cpu_s"]) / max(n - 1, 1) * 1e3,
                    "peak_rss_mb": run["maxrss_mb"],
                    "in_flight_mean": ttft_errors(run, gt, 64)["in_flight_mean"],
                }
            )
        return {"median": median_dict(reps), "runs": reps}

    def floor(self) -> dict[str, Any]:
        """benchmarks/min_client.py (no parsing, no records) against the same server: the in-flight floor."""
        reps = []
        for _ in range(self.args.repeats):
            d = self._dir("floor")
            d.mkdir()
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
        run, gt = self.one("mock-ttft", {}, server_kind="mock")
        return ttft_errors(run, gt, 28)

    def prompt_build(self) -> dict[str, Any]:
        d = self._dir("prompt-build")
        d.mkdir()
        times = []
        info: dict[str, Any] = {}
        for _ in range(self.args.repeats):
            with server("mock", self.server_cores, d / "gt.jsonl") as url:
                cmd = [PY, str(HERE / "prompt_build.py"), url, str(self.args.build_prompts), "130000"]
                out = subprocess.run(
                    pinned(cmd, self.client_cores),
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    check=True,
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


def uvloop_available() -> bool:
    out = subprocess.run([PY, "-c", "import uvloop"], capture_output=True)
    return out.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description="kvbench harness-overhead benchmark")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-uvloop", action="store_true", help="hide uvloop from the kvbench child")
    ap.add_argument(
        "--client-http", choices=["raw", "aiohttp"], default="raw", help="KVBENCH_CLIENT_HTTP for the child"
    )
    ap.add_argument("--capacity-requests", type=int, default=8000)
    ap.add_argument("--cpu-requests", type=int, default=2000)
    ap.add_argument("--build-prompts", type=int, default=100)
    ap.add_argument("--only", default="", help="comma list of: ttft,cpu,capacity,long,floor,mock,build,cli")
    ap.add_argument("--out", default=str(RESULTS / "latest"), help="output prefix (.json, .md added)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir of run directories")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(","))) or {
        "ttft",
        "cpu",
        "capacity",
        "long",
        "floor",
        "mock",
        "build",
        "cli",
    }
    spawn([sys.executable, "-c", "pass"], Path(os.devnull), dict(os.environ))  # start it while small
    b = Bench(args)
    t_start = time.perf_counter()
    res: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "cpu_model": cpu_model(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "server_cores": b.server_cores,
            "client_cores": b.client_cores,
            "uvloop_in_client": uvloop_available() and not args.no_uvloop,
            "client_http": args.client_http,
        },
        "repeats": args.repeats,
    }
    try:
        base = dict.fromkeys(("cpu_s", "user_s", "sys_s", "maxrss_mb"), 0.0)
        if only & {"ttft", "cpu", "capacity", "long"}:
            base = b.baseline_cpu()
        res["baseline"] = base
        _log(f"baseline (1 request): cpu {base['cpu_s']:.3f} s")
        if "ttft" in only:
            res["ttft"] = b.ttft(base)
            _log(f"ttft: {_fmt(res['ttft']['median'])}")
        if "cpu" in only:
            res["cpu"] = b.cpu(base)
            _log(f"cpu: {_fmt(res['cpu']['median'])}")
        if "capacity" in only:
            res["capacity"] = b.capacity(base)
            _log(f"capacity: {_fmt(res['capacity']['median'])}")
        if "long" in only:
            # one request at a time (the published TTFT test's shape): what a 750 KB body adds
            res["seq_1k"] = b.ttft(base, lengths=1000, prompts=5, concurrency=1, requests=30)
            _log(f"sequential 1k: {_fmt(res['seq_1k']['median'])}")
            res["seq_130k"] = b.ttft(base, lengths=130000, prompts=5, concurrency=1, requests=30)
            _log(f"sequential 130k: {_fmt(res['seq_130k']['median'])}")
            # and at 28 connections: 28 x 750 KB per burst through one server core
            res["long_prompt"] = b.ttft(base, lengths=130000, prompts=28)
            _log(f"long, 28 connections: {_fmt(res['long_prompt']['median'])}")
        if "floor" in only:
            res["floor"] = b.floor()
            _log(f"floor (minimal raw client): {_fmt(res['floor'])}")
        if "mock" in only:
            res["mock_crosscheck"] = b.mock_crosscheck()
            _log(f"mock cross-check: {_fmt(res['mock_crosscheck'])}")
        if "build" in only:
            res["prompt_build"] = b.prompt_build()
            _log(f"prompt build: {_fmt(res['prompt_build'])}")
        if "cli" in only:
            res["cli_help"] = b.cli_help()
            _log(f"cli --help: {_fmt(res['cli_help'])}")
    finally:
        if not args.keep:
            shutil.rmtree(b.tmp, ignore_errors=True)
        else:
            _log(f"run directories kept in {b.tmp}")
    res["bench_wall_s"] = time.perf_counter() - t_start
    res["summary"] = summary(res)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


def summary(res: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {}
    if "ttft" in res:
        m = res["ttft"]["median"]
        s.update(
            ttft_error_mean_ms=m["error_mean_ms"],
            ttft_error_p99_ms=m["error_p99_ms"],
            in_flight_mean=m["in_flight_mean"],
            cpu_ms_per_request=m["cpu_ms_per_request"],
            peak_rss_mb=m["peak_rss_mb"],
        )
    if "cpu" in res:
        s["cpu_ms_per_request"] = res["cpu"]["median"]["cpu_ms_per_request"]
        s["peak_rss_mb"] = max(s.get("peak_rss_mb", 0.0), res["cpu"]["median"]["peak_rss_mb"])
    if "capacity" in res:
        s["capacity_req_s"] = res["capacity"]["median"]["req_s"]
    if "seq_130k" in res:
        s["long_prompt_extra_error_ms"] = (
            res["seq_130k"]["median"]["error_mean_ms"] - res["seq_1k"]["median"]["error_mean_ms"]
        )
    if "long_prompt" in res and "ttft" in res:
        s["long_prompt_extra_error_28conn_ms"] = (
            res["long_prompt"]["median"]["error_mean_ms"] - res["ttft"]["median"]["error_mean_ms"]
        )
    if "prompt_build" in res:
        s["prompt_build_s"] = res["prompt_build"]["build_s"]
    if "cli_help" in res:
        s["cli_help_s"] = res["cli_help"]["median_s"]
    s["met"] = {k: _meets(k, v) for k, v in s.items() if k in TARGETS}
    return s


def _meets(key: str, value: float) -> bool:
    op, target = TARGETS[key]
    return value <= target if op == "<=" else value >= target


def _fmt(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items())


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    s = res["summary"]
    lines = [
        "# kvbench harness overhead (`make bench`)",
        "",
        f"- date: {res['date']}",
        f"- machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}; {m['platform']}",
        f"- server pinned to cores {m['server_cores']}, kvbench client to {m['client_cores']}; "
        f"uvloop in the client: {m['uvloop_in_client']}",
        f"- median of {res['repeats']} runs; whole bench {res['bench_wall_s']:.0f} s",
        "",
        "| measure | kvbench | target | met | vLLM bench serve 0.33 | minimal aiohttp client |",
        "|---|---|---|---|---|---|",
    ]
    names = {
        "ttft_error_mean_ms": "TTFT error mean, ms",
        "ttft_error_p99_ms": "TTFT error p99, ms",
        "in_flight_mean": "requests in flight (of 28)",
        "capacity_req_s": "capacity, req/s (0 ms server, 64 conn)",
        "cpu_ms_per_request": "client CPU per request, ms",
        "peak_rss_mb": "peak RSS at 28 connections, MB",
        "long_prompt_extra_error_ms": "130k-token prompt: extra TTFT error (one at a time), ms",
        "prompt_build_s": "build + verify 100 x 130k-token prompts, s",
        "cli_help_s": "`kvbench --help`, s",
    }
    for key, label in names.items():
        if key not in s:
            continue
        op, target = TARGETS[key]
        refs = [REFERENCE[r].get(key) for r in REFERENCE]
        lines.append(
            f"| {label} | {s[key]:.2f} | {op} {target:g} | {'yes' if s['met'][key] else 'NO'} | "
            + " | ".join("-" if v is None else f"{v:g}" for v in refs)
            + " |"
        )
    if "ttft" in res:
        lines += ["", "TTFT error split (ms; mean / p50 / p99):", ""]
        lines.append("| run | n | error | send | return | in flight |")
        lines.append("|---|---|---|---|---|---|")
        rows = [("1k-token prompts, 28 connections", res["ttft"]["median"])]
        if "cpu" in res:
            rows.append(
                (f"1k, 28 connections, {res['cpu']['median']['n']:.0f} requests", res["cpu"]["median"])
            )
        if "long_prompt" in res:
            rows.append(("130k-token prompts, 28 connections", res["long_prompt"]["median"]))
        if "seq_1k" in res:
            rows.append(("1k, one at a time (30 requests)", res["seq_1k"]["median"]))
            rows.append(("130k, one at a time (30 requests)", res["seq_130k"]["median"]))
        if "mock_crosscheck" in res:
            rows.append(("1k, kvbench mock fixed-delay (1 run)", res["mock_crosscheck"]))
        for name, r in rows:
            lines.append(
                f"| {name} | {r['n']:.0f} | {r['error_mean_ms']:.2f} / {r['error_p50_ms']:.2f} / "
                f"{r['error_p99_ms']:.2f} | {r['send_mean_ms']:.2f} / {r['send_p50_ms']:.2f} / "
                f"{r['send_p99_ms']:.2f} | {r['return_mean_ms']:.2f} / {r['return_p50_ms']:.2f} / "
                f"{r['return_p99_ms']:.2f} | {r['in_flight_mean']:.1f} |"
            )
    if "ttft" in res:
        t = res["ttft"]["median"]
        fl = res.get("floor")
        lines += [
            "",
            f"In flight: the mean of the server's in_flight_at_receive (the figure in the table) is "
            f"{t['in_flight_mean']:.1f}; averaged over time, the server held "
            f"{t['in_flight_time_avg']:.1f} of 28."
            + (
                f" A minimal raw-socket client (benchmarks/min_client.py: no parsing, no records) gets "
                f"{fl['in_flight_mean']:.1f} at receive and {fl['in_flight_time_avg']:.1f} over time: "
                "the closed loop's 28 requests start together and the fixed-delay server keeps them in a "
                "train, so each arrival is sampled just as the rest of the train is being re-sent."
                if fl
                else ""
            ),
        ]
    if "cpu" in res:
        c = res["cpu"]["median"]
        lines.append(
            f"Client CPU per request = (CPU of a {c['n']:.0f}-request run - CPU of the same command doing 1 "
            f"request, {res['baseline']['cpu_s']:.2f} s) / {c['n'] - 1:.0f}: "
            f"{c['cpu_ms_per_request']:.3f} ms "
            f"({c['user_ms_per_request']:.3f} user + {c['sys_ms_per_request']:.3f} system). Peak RSS is the "
            f"child's whole ru_maxrss, imports included (a 1-request run peaks at "
            f"{res['baseline']['maxrss_mb']:.0f} MB)."
        )
    if "capacity" in res:
        c = res["capacity"]["median"]
        lines.append(
            f"Capacity run: {c['requests']:.0f} requests, {c['cpu_ms_per_request']:.3f} ms CPU per request, "
            f"peak RSS {c['peak_rss_mb']:.0f} MB, server-side in flight {c['in_flight_mean']:.1f} of 64."
        )
    if "long_prompt" in res:
        lp = res["long_prompt"]["median"]
        lines.append(
            f"130k-token prompts at 28 connections: peak RSS {lp['peak_rss_mb']:.0f} MB "
            "(28 prompts of ~750 KB); "
            "its error is mostly the first burst (28 x 750 KB through one server core at once, plus connect)."
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
