"""Delivery that is not the server's: when a request's TTFT is how a proxy delivered the stream.

A proxy in front of the server can hold the stream and pass it on in batches; the client then
stamps the first token when the batch arrives, and TTFT reads as the proxy's hold, not the
server's prefill. Three signs, judged per request (`judge`, the record's `delivery`):
- `burst`: the whole multi-token answer came within BURST_NS of the response head (nginx's
  default `proxy_buffering on`: head, tokens and end arrive together when generation ends);
- `batched`: the read that carried the first token already held later tokens, and those tokens
  stand for at least HOLD_MIN_NS (and HOLD_SHARE of the TTFT) of the answer's own pace (HAProxy's
  default `mode http` sends with MSG_MORE: the kernel holds segments up to ~200 ms). A server that
  writes several tokens within a millisecond is not flagged: its first read may hold them all
  but the error is below a millisecond;
- `held_head`: the head came with the first token (within BURST_NS) after a gap of HEAD_GAP_NS or
  more: vLLM, SGLang and the mock send the head as soon as the request is accepted, so a head
  that waits for the first token was most likely held on the way.
A phase where most answers carry one of these gets one warning line naming the likely cause
(`delivery_warning`); the report labels such TTFTs delivery-bound from the rows' `delivery`.
Seen from the client, a server too loaded to write tokens as it makes them looks the same (the
ci mock at 64 streams on two busy cores: ~35% of answers flagged, no warning); the warning says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbench.client.record import RequestRecord

BURST_NS = 1_000_000
HOLD_MIN_NS = 1_000_000
HOLD_SHARE = 0.1
HEAD_GAP_NS = 5_000_000
CAUSE = (
    "TTFT here is delivery-bound, not the server's: a proxy batching the stream? "
    "HAProxy: option http-no-delay; nginx: proxy_buffering off or X-Accel-Buffering: no "
    "(else a server too loaded to write tokens as it makes them)"
)
_WHAT = {
    "burst": "tokens arrived in one burst with the response headers ({n} of {total} answers)",
    "batched": "the first read already held later tokens ({n} of {total} answers; median {k} tokens)",
    "held_head": "the response head came only with the first token ({n} of {total} answers; "
    "median {gap:.0f} ms after the request)",
}


def is_burst(rec: RequestRecord) -> bool:
    """True when a multi-token answer arrived, first to last token, within BURST_NS of its headers."""
    tokens = rec.token_ns
    return rec.headers_ns is not None and len(tokens) >= 2 and tokens[-1] - rec.headers_ns <= BURST_NS


def judge(rec: RequestRecord) -> str | None:
    """How the request's first token was delivered when it was not the server's pace; None otherwise."""
    tokens, head, sent = rec.token_ns, rec.headers_ns, rec.sent_ns
    if not rec.ok or not tokens or head is None or sent is None:
        return None
    if is_burst(rec):
        return "burst"
    first = rec.first_read_tokens
    if 2 <= first < len(tokens):
        pace = (tokens[-1] - tokens[0]) / (len(tokens) - 1)  # the answer's own mean token spacing
        if (first - 1) * pace >= max(HOLD_MIN_NS, HOLD_SHARE * (tokens[0] - sent)):
            return "batched"
    if tokens[0] - head <= BURST_NS and head - sent >= HEAD_GAP_NS:
        return "held_head"
    return None


def delivery_warning(records: Iterable[RequestRecord]) -> str | None:
    """One line for a phase where most answers were delivery-bound (the commonest sign named); else None."""
    total = 0
    kinds: Counter[str] = Counter()
    firsts: list[int] = []
    gaps: list[float] = []
    for rec in records:
        if not rec.ok or not rec.token_ns:
            continue
        total += 1
        if rec.delivery:
            kinds[rec.delivery] += 1
            firsts.append(rec.first_read_tokens)
            if rec.headers_ns is not None and rec.sent_ns is not None:
                gaps.append((rec.headers_ns - rec.sent_ns) / 1e6)
    flagged = sum(kinds.values())
    if not total or flagged * 2 <= total:
        return None
    kind = kinds.most_common(1)[0][0]
    what = _WHAT[kind].format(
        n=kinds[kind], total=total, k=int(median(firsts)), gap=median(gaps) if gaps else 0.0
    )
    return f"{what}: {CAUSE}"


# the name the run's phase entries call (kept: the burst rule is one case of the delivery check)
burst_warning = delivery_warning
