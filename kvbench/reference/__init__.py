"""Published datasets kvbench compares against, shipped as YAML next to this file.

    ibm-g4   the IBM Storage Scale G4 KV-cache results (Redbooks MD260021)

`reference_path(name)` finds a dataset's file, `load_reference(name)` parses it
into the validated `kvbench.report.claims.ClaimsFile` model, and
`published_points(name)` gives the TTFT points a report overlays on its plots.
The schema is documented in `kvbench.report.claims`.
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


def published_points(name: str = DEFAULT) -> dict[str, list[tuple[int, float]]]:
    """Published TTFT points as {"cold": [(tokens, ttft_ms)], "warm": [...]}.

    Read from figures named ``ttft_uncached_<N>k`` / ``ttft_cached_<N>k`` with a
    published value (in seconds or milliseconds); unpublished ones are skipped.
    """
    from kvbench.report.quantities import convert, parse_unit

    cf = load_reference(name)
    out: dict[str, list[tuple[int, float]]] = {"cold": [], "warm": []}
    ms = parse_unit("ms")
    for fig in cf.figures:
        if fig.value is None:
            continue
        for prefix, key in (("ttft_uncached_", "cold"), ("ttft_cached_", "warm")):
            rest = fig.id.removeprefix(prefix)
            if rest != fig.id and rest.endswith("k") and rest[:-1].isdigit():
                tokens = int(rest[:-1]) * 1000
                out[key].append((tokens, convert(fig.value, parse_unit(fig.unit), ms)))
    for pts in out.values():
        pts.sort()
    return out
