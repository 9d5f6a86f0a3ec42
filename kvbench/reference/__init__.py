"""Published datasets kvbench compares against, shipped as YAML next to this file. Data only.

    ibm-g4   the IBM Storage Scale G4 KV-cache results (Redbooks MD260021)

`available()` lists them and `reference_path(name)` finds a dataset's file; nothing here
imports analysis code. Reading and validating a dataset is `kvbench.audit.load_reference`
(schema: `kvbench/audit/__init__.py`); the `compare:` section (which measured quantity a run
report sets next to which published figure) is read by `kvbench.report.published.comparison`.
"""

from __future__ import annotations

from pathlib import Path

from kvbench.errors import UsageError

HERE = Path(__file__).resolve().parent
DEFAULT = "ibm-g4"


def available() -> list[str]:
    """Names of the shipped datasets."""
    return sorted(p.stem for p in HERE.glob("*.yaml"))


def reference_path(name: str = DEFAULT) -> Path:
    path = HERE / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"reference: unknown dataset '{name}' (shipped: {', '.join(available())})")
    return path
