"""Shared parts of `make bench`: cores, the ground-truth server, child processes, TTFT error analysis.

Every tool's requests are reduced to the same rows (request_id, sent and first-token times on
CLOCK_MONOTONIC, ok) and matched by request id with the ground-truth server's own records, so
kvbench, the aiohttp reference client and vLLM's `bench serve` are scored by one function.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
SCENARIO = HERE / "scenarios" / "ttft_error.yaml"

# --- machine, cores --------------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def core_plan(server: str = "", client: str = "") -> tuple[list[int] | None, list[int] | None]:
    """(server cores, client cores): different cores where there are two or more. `server` and
    `client` ("0", "1-3", "1,4"): chosen by hand (a bigger box gives the client a core per load
    worker); otherwise the first core serves and the second runs the client."""
    if server or client:
        s, c = parse_cores(server or "0"), parse_cores(client or "1")
        if set(s) & set(c):
            raise SystemExit(f"--server-cores {server} and --client-cores {client} overlap")
        missing = sorted((set(s) | set(c)) - os.sched_getaffinity(0))
        if missing:
            raise SystemExit(f"cores {missing} are not available to this process")
        return s, c
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    return [cores[0]], [cores[1]]


def parse_cores(text: str) -> list[int]:
    """ "1-3,6" -> [1, 2, 3, 6] (taskset's list syntax)."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return sorted(set(out))


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
        if opts.get("ttft_ms_max") is not None:
            cmd += ["--ttft-ms-max", str(opts["ttft_ms_max"])]
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


def spawn(cmd: list[str], log: Path, env: dict[str, str], cwd: Path = ROOT) -> dict[str, Any]:
    """Run cmd through benchmarks/spawner.py (started while this process is small; see there)."""
    global _SPAWNER
    if _SPAWNER is None:
        _SPAWNER = subprocess.Popen(
            [PY, str(HERE / "spawner.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    assert _SPAWNER.stdin is not None and _SPAWNER.stdout is not None
    _SPAWNER.stdin.write(json.dumps({"cmd": cmd, "log": str(log), "env": env, "cwd": str(cwd)}) + "\n")
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
    kernel_stamps: bool = True,
    env_extra: dict[str, str] | None = None,
    tx_stamps: bool = True,
    source: Path = ROOT,
) -> dict[str, Any]:
    """`kvbench run` in a child process; its rows, manifest, CPU seconds and peak RSS. `source`: the
    checkout whose kvbench runs (its folder is the child's cwd, first on its import path)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["run", str(SCENARIO), "--base-url", base_url, "--output-dir", str(out_dir)]
    args += ["--no-report", "--quiet"]
    for k, v in sets.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    cmd = [PY, "-c", _STUB.format(no_uvloop=no_uvloop), *args]
    t0 = time.perf_counter()
    log = out_dir.parent / "kvbench.log"
    env = {**os.environ, "KVBENCH_CLIENT_HTTP": client_http}
    env["KVBENCH_KERNEL_STAMPS"] = "1" if kernel_stamps else "0"
    env["KVBENCH_TX_STAMPS"] = "1" if tx_stamps else "0"  # kernel send stamps (txstamp), on top of receive
    env.update(env_extra or {})
    ru = spawn(pinned(cmd, cores), log, env, source)  # this child's own rusage (CPU, peak RSS)
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


def kvbench_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """kvbench's requests.jsonl as the common rows (absolute CLOCK_MONOTONIC ns)."""
    origin = run["manifest"]["clock_origin_ns"]
    out = []
    for r in run["rows"]:
        if r["phase"] == "probe":
            continue
        first = r["first_token_ns"]
        user = r.get("first_token_user_ns")
        out.append(
            {
                "request_id": r["request_id"],
                "ok": r["status"] == "ok" and first is not None,
                "sent_ns": r["sent_ns"] + origin,
                "first_ns": None if first is None else first + origin,
                "first_user_ns": None if user is None else user + origin,
                "end_ns": None if r["end_ns"] is None else r["end_ns"] + origin,
                "send_kernel": r.get("send_clock_source") == "kernel_tx",
            }
        )
    return out


def ttft_errors(rows: list[dict[str, Any]], gt: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Client TTFT minus the server's, matched by request id; split into send and return."""
    by_id = {g["request_id"]: g for g in gt}
    # each connection's first request also waited for its TCP connect, which no stamp can remove and
    # every tool pays alike: the error is reported without them, and with them as error_all
    first_on_conn: dict[Any, tuple[int, str]] = {}
    for g in gt:
        key = g.get("conn")
        if key is not None and (key not in first_on_conn or g["received_ns"] < first_on_conn[key][0]):
            first_on_conn[key] = (g["received_ns"], g["request_id"])
    connecting = {rid for _, rid in first_on_conn.values()}
    err, err_all, first_req, send, ret, lag, unmatched, failed = [], [], [], [], [], [], 0, 0
    send_kernel = 0  # rows whose start is the kernel's TX stamp (kvbench's txstamp)
    merged: list[int] = []  # later tokens already in when the first token was read (see kstamp)
    paced = 0
    for r in rows:
        if not r["ok"]:
            failed += 1
            continue
        g = by_id.get(r["request_id"])
        if g is None or g.get("first_token_ns") is None:
            unmatched += 1
            continue
        sent, first = r["sent_ns"], r["first_ns"]
        server_ttft = g["first_token_ns"] - g["received_ns"]
        err_all.append((first - sent - server_ttft) / 1e6)
        send_kernel += bool(r.get("send_kernel"))
        if r["request_id"] in connecting:
            first_req.append(err_all[-1])
            continue
        err.append((first - sent - server_ttft) / 1e6)
        send.append((g["received_ns"] - sent) / 1e6)
        ret.append((first - g["first_token_ns"]) / 1e6)
        if r.get("first_user_ns") is not None:
            lag.append((r["first_user_ns"] - first) / 1e6)
        tokens = g.get("token_ns") or []
        if len(tokens) > 1 and tokens[1] - tokens[0] > 200_000:  # paced tokens: which one did the stamp see?
            paced += 1
            later = sum(1 for t in tokens[1:] if t - 100_000 <= first)
            if later:
                merged.append(later)
    arrivals = sorted(
        (g for g in gt if g.get("first_token_ns") is not None and g["request_id"] in by_id),
        key=lambda g: g["received_ns"],
    )
    steady = arrivals[concurrency:-concurrency] if len(arrivals) > 2 * concurrency else arrivals
    in_flight = statistics.fmean(g["in_flight_at_receive"] for g in steady) if steady else float("nan")
    out = {
        "n": len(err),
        "failed": failed,
        "unmatched": unmatched,
        "in_flight_mean": in_flight,
        "in_flight_time_avg": time_weighted_in_flight(gt, steady),
    }
    out["connects"] = len(connecting)
    out["send_kernel_frac"] = send_kernel / len(err_all) if err_all else float("nan")
    out["first_read_merged_frac"] = len(merged) / paced if paced else float("nan")
    out["first_read_merged_tokens_mean"] = statistics.fmean(merged) if merged else 0.0
    pairs = (("error", err), ("error_all", err_all), ("error_first", first_req), ("send", send))
    for name, xs in (*pairs, ("return", ret), ("lag", lag)):
        out[f"{name}_mean_ms"] = statistics.fmean(xs) if xs else float("nan")
        out[f"{name}_p50_ms"] = pct(xs, 0.5)
        out[f"{name}_p99_ms"] = pct(xs, 0.99)
    return out


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


def completed_rate(rows: list[dict[str, Any]]) -> float:
    """Completed requests / (last end - first send), from the common rows."""
    ok = [r for r in rows if r["ok"] and r["end_ns"] is not None]
    if len(ok) < 2:
        return 0.0
    span = (max(r["end_ns"] for r in ok) - min(r["sent_ns"] for r in ok)) / 1e9
    return len(ok) / span


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def median_dict(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    keys = dicts[0].keys()
    num = {k for k in keys if isinstance(dicts[0][k], int | float)}
    return {k: med([d[k] for d in dicts]) if k in num else dicts[0][k] for k in keys}


def uvloop_available() -> bool:
    out = subprocess.run([PY, "-c", "import uvloop"], capture_output=True)
    return out.returncode == 0


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def fmt(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items())
