"""Host and GPU exporters: which series each kind keeps, and one scrape that never raises.

A scrape answers samples or a one-line reason (down, slow, not 200, not Prometheus text, no series
of its kind): the sampler writes the reason as a row and warns once, and the run goes on.
Names are the exporters' own: node-exporter's node_network_receive_bytes_total{device} and
node_disk_read_bytes_total{device}; DCGM's DCGM_FI_DEV_GPU_UTIL (percent), DCGM_FI_DEV_FB_USED
(MiB) and the rest of DCGM_FI_DEV_* / DCGM_FI_PROF_*.
"""

from __future__ import annotations

from typing import Any

from kvbench.engines.telemetry import SampleKey, parse_metrics
from kvbench.redact import Redactor, redact_text

# family-name prefixes kept per kind (the text parser names a counter's family without _total)
KEEP: dict[str, tuple[str, ...]] = {
    "node": (
        "node_network_receive_bytes",
        "node_network_transmit_bytes",
        "node_disk_read_bytes",
        "node_disk_written_bytes",
        "node_cpu_seconds",
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
    ),
    "dcgm": ("DCGM_FI_DEV_", "DCGM_FI_PROF_"),
    "prometheus": (),  # everything the exporter serves, up to MAX_SERIES
}
MAX_BODY = 8 * 2**20  # an exporter answering more than this is not one
MAX_SERIES = 5000


class ScrapeFailed(Exception):
    """One line saying why a scrape gave no samples."""


def parse_exporter(kind: str, text: str) -> dict[SampleKey, float]:
    """The kept samples of an exporter's answer; ScrapeFailed when it is not Prometheus text or has none."""
    try:
        samples = parse_metrics(text, keep=KEEP[kind])
    except Exception as exc:  # the parser raises several types on garbage; all mean the same here
        why = redact_text(str(exc))[:80]
        raise ScrapeFailed(f"not Prometheus text ({type(exc).__name__}: {why})") from None
    if not samples:
        raise ScrapeFailed(f"no {kind} series in the answer")
    if len(samples) > MAX_SERIES:
        kept = dict(sorted(samples.items())[:MAX_SERIES])
        return kept
    return samples


async def scrape_exporter(
    session: Any, url: str, headers: dict[str, str], kind: str, timeout_s: float
) -> dict[SampleKey, float]:
    """GET `url` and keep its `kind` series; ScrapeFailed (one line) on anything else."""
    import aiohttp

    try:
        async with session.get(
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False
        ) as resp:
            if resp.status != 200:
                raise ScrapeFailed(f"answered HTTP {resp.status}")
            body = await resp.content.read(MAX_BODY + 1)
    except TimeoutError:
        raise ScrapeFailed(f"no answer within {timeout_s:g} s") from None
    except aiohttp.ClientError as exc:
        why = redact_text(str(exc))[:80]
        raise ScrapeFailed(f"cannot reach it ({type(exc).__name__}: {why})") from None
    if len(body) > MAX_BODY:
        raise ScrapeFailed(f"answered more than {MAX_BODY // 2**20} MiB")
    # an exporter may echo the request's Authorization (or any credential) into a label
    return parse_exporter(kind, Redactor(headers)(body.decode("utf-8", errors="replace")))
