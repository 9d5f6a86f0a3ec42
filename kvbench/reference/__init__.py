"""Published datasets kvbench compares against, shipped as YAML next to this file.

    ibm-g4   the IBM Storage Scale G4 KV-cache results (Redbooks MD260021)

`reference_path(name)` finds a dataset's file and `load_reference(name)` parses it
into the validated `kvbench.report.claims.ClaimsFile` model. The schema is
documented in `kvbench.report.claims`; the `compare:` section (which measured
quantity a run report sets next to which published figure) in `kvbench.report.published`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.errors import UsageError

if TYPE_CHECKING:
    from kvbench.report.claims import ClaimsFile

HERE = Path(__file__).resolve().parent
DEFAULT = "ibm-g4"


def available() -> list[str]:
    """Names of the shipped datasets."""
    return sorted(p.stem for p in HERE.glob("*.yaml"))


def reference_path(name: str = DEFAULT) -> Path:
    path = HERE / f"{name}.yaml"
    if not path.exists():
        raise UsageError(f"reference: unknown dataset '{name}' (shipped: {', '.join(available())})")
    return path


def load_reference(name: str = DEFAULT) -> ClaimsFile:
    from kvbench.report.claims import load_claims

    return load_claims(reference_path(name))
