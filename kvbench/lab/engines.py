"""The lab's engines: two llama-server instances saving slots to G4, each behind a G4 connector.

They are started detached (their own session, no parent-death signal), because they must outlive
`kvbench lab up`; `kvbench lab down` stops them. Their argv is kvbench's own llama.cpp command
(`kvbench.engines.serve.command`), with the slot-save path on the G4 mount and the RAM prompt cache
off (--cache-ram 0): a G4 hit must come from G4, not from a RAM copy llama.cpp kept on the side.
Every process's argv names the lab directory, which is how `down` finds them after a crash.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kvbench.lab.config import EngineInfo, LabConfig
from kvbench.lab.system import LabError

HOST = "127.0.0.1"
INSTANCES = ("a", "b")


def server_command(cfg: LabConfig, index: int, g4: Path, model: Path) -> list[str]:
    from kvbench.engines.serve import ServeOptions, command

    opts = ServeOptions(
        slots=cfg.slots,
        ctx=cfg.ctx,
        threads=cfg.threads,
        cache_ram_mib=0,
        slot_save_dir=g4,
        model=model,
        served_name="kvbench-tiny",
        quiet=True,
    )
    argv, _env = command("llamacpp", opts, port=cfg.engine_port(index, raw=True), model=model)
    return argv


def connector_command(cfg: LabConfig, index: int, g4: Path, root: Path) -> list[str]:
    return [
        sys.executable, "-m", "kvbench.lab.connector",
        "--upstream", f"http://{HOST}:{cfg.engine_port(index, raw=True)}",
        "--g4", str(g4),
        "--slots", str(cfg.slots),
        "--host", HOST,
        "--port", str(cfg.engine_port(index)),
        "--lab-dir", str(root),
    ]  # fmt: skip


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        fh.write(("$ " + " ".join(argv) + "\n").encode())
        fh.flush()
        return subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"{url}: exited {proc.returncode} before it was healthy (log: {log})")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                if resp.status == 200 and json.loads(resp.read()).get("data"):
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.25)
    raise LabError(f"{url}: not healthy after {timeout_s:g} s (log: {log})")


def start_engines(
    cfg: LabConfig, g4: Path, root: Path, say: Callable[[str], None], record: Callable[[EngineInfo], None]
) -> list[EngineInfo]:
    """Install llama.cpp and the tiny model when missing, start both instances, wait for each."""
    from kvbench.engines.install import install
    from kvbench.engines.models import make_model

    install("llamacpp", progress=say)  # reused when already there
    model = Path(cfg.model) if cfg.model else make_model("llamacpp", progress=say)
    infos = []
    for index, name in enumerate(INSTANCES):
        log = root / "logs" / f"llama-server-{name}.log"
        server = spawn(server_command(cfg, index, g4, model), log)
        raw_url = f"http://{HOST}:{cfg.engine_port(index, raw=True)}"
        conn_log = root / "logs" / f"connector-{name}.log"
        connector = spawn(connector_command(cfg, index, g4, root), conn_log)
        info = EngineInfo(
            name=name,
            url=f"http://{HOST}:{cfg.engine_port(index)}",
            raw_url=raw_url,
            server_pid=server.pid,
            connector_pid=connector.pid,
            log=str(log),
        )
        record(info)  # in the state file before the wait: a failed start is still cleaned up
        wait_healthy(raw_url, server, log)
        wait_healthy(info.url, connector, conn_log, timeout_s=30)
        say(f"engine {name}: {info.url} (G4 connector) -> {raw_url} (llama-server)")
        infos.append(info)
    return infos
