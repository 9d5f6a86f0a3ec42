"""`kvbench engines status`: what is installed, which tiny models exist, where the logs are."""

from __future__ import annotations

from kvbench.engines import ENGINES
from kvbench.engines.install import engine_dir, engines_dir, installed


def status_lines() -> list[str]:
    lines = [f"engines dir: {engines_dir()}  (set KVBENCH_ENGINES_DIR to move it)"]
    for name in ENGINES:
        root = engine_dir(name)
        info = installed(name)
        if info is None:
            state = "partial or stale install (rerun install)" if root.exists() else "not installed"
            lines.append(f"{name}: {state}  ->  kvbench engines install {name}")
        else:
            exe = info.server_bin or info.python
            lines.append(
                f"{name}: installed {info.installed_at}, {info.version}, took {info.total_seconds:.0f} s "
                f"({', '.join(f'{k} {v:.0f}s' for k, v in info.step_seconds.items())}); {exe}"
            )
        models = root / "models"
        found = (
            sorted(p.name for p in models.iterdir() if not p.name.endswith(".tmp")) if models.is_dir() else []
        )
        lines.append(
            f"  models: {', '.join(found) if found else 'none  ->  kvbench engines make-model ' + name}"
        )
        if (root / "logs").is_dir():
            lines.append(f"  logs: {root / 'logs'}")
    return lines
