"""Runs the bench's measured children and reports each one's own rusage (for `make bench`).

Linux carries a process's RSS high-water mark across fork + exec: a child forked from the
bench (which grows as it reads results) would report the bench's peak as its own ru_maxrss.
This helper starts while the bench is small and forks the children instead. One JSON request
per stdin line: {"cmd": [...], "log": PATH, "env": {...}}; one JSON answer per line:
{"rc", "user_s", "sys_s", "maxrss_kb", "wall_s"}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.perf_counter()
        with open(req["log"], "wb") as fh:
            proc = subprocess.Popen(req["cmd"], stdout=fh, stderr=fh, cwd=req.get("cwd"), env=req.get("env"))
            _, status, ru = os.wait4(proc.pid, 0)
        out = {
            "rc": os.waitstatus_to_exitcode(status),
            "user_s": ru.ru_utime,
            "sys_s": ru.ru_stime,
            "maxrss_kb": ru.ru_maxrss,
            "wall_s": time.perf_counter() - t0,
        }
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
