"""Published datasets kvbench compares against, shipped as YAML next to this file. Data only.

    ibm-g4   the IBM Storage Scale G4 KV-cache results (Redbooks MD260021)

`available()` lists them and `reference_path(name)` finds a dataset's file; nothing here
imports analysis code. Reading and validating a dataset is `kvbench.audit.load_reference`
(schema: `kvbench/audit/__init__.py`). `published_points` stays here until the report
moves it to `kvbench/report/published.py`.
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


def published_points(name: str = DEFAULT) -> dict[str, list[tuple[int, float]]]:
    """Published TTFT points as {"cold": [(tokens, ttft_ms)], "warm": [...]}.

    Read from figures named ``ttft_uncached_<N>k`` / ``ttft_cached_<N>k`` with a
    published value (in seconds or milliseconds); unpublished ones are skipped.
    """
    from kvbench.audit.schema import load_reference
    from kvbench.audit.units import convert, parse_unit

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
