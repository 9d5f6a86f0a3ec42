"""Delivery that is not the server's: when a request's TTFT is how a proxy delivered the stream.

A proxy in front of the server can hold the stream and pass it on in batches; the client then
stamps the first token when the batch arrives, and TTFT reads as the proxy's hold, not the
server's prefill. Two signs, judged per request (`judge`, the record's `delivery`):
- `burst`: the whole multi-token answer came within BURST_NS of the response head (nginx's
  default `proxy_buffering on`: head, tokens and end arrive together when generation ends);
- `batched`: the read that carried the first token already held later tokens, and those tokens
  stand for at least HOLD_MIN_NS (and HOLD_SHARE of the TTFT) of the answer's own pace (HAProxy's
  default `mode http` sends with MSG_MORE: the kernel holds segments up to ~200 ms). A server that
  writes several tokens within a millisecond is not flagged: its first read may hold them all
  but the error is below a millisecond. A first read that held the WHOLE answer, its head come
  HOLD_MIN_NS earlier, is `batched` too: no pace can be seen, and TTFT reads as the last token's.
Not a sign on its own: a head that arrives only with the first token. nginx with
`proxy_buffering off`, the fix itself, holds the head until the first body bytes, and its first
tokens still arrive within a millisecond of the mock's own log (tests/integration/
test_proxies.py); a proxy that held head and token alike shows up as a batched first read.
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
CAUSE = (
    "TTFT here is delivery-bound, not the server's: a proxy batching the stream? "
    "HAProxy: option http-no-delay; nginx: proxy_buffering off or X-Accel-Buffering: no "
    "(else a server too loaded to write tokens as it makes them)"
)
_WHAT = {
    "burst": "tokens arrived in one burst with the response headers ({n} of {total} answers)",
    "batched": "the first read already held later tokens ({n} of {total} answers; median {k} tokens)",
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
    if first >= len(tokens) >= 2 and tokens[0] - head >= HOLD_MIN_NS:
        # the whole answer in the read that carried its first token, the head long before: the
        # answer's own pace is hidden, and TTFT reads as the time to the LAST token (a TTFT test's
        # short answers behind HAProxy's hold; the head-with-tokens case is `burst` above)
        return "batched"
    if 2 <= first < len(tokens):
        pace = (tokens[-1] - tokens[0]) / (len(tokens) - 1)  # the answer's own mean token spacing
        if (first - 1) * pace >= max(HOLD_MIN_NS, HOLD_SHARE * (tokens[0] - sent)):
            return "batched"
    return None


def delivery_warning(records: Iterable[RequestRecord]) -> str | None:
    """One line for a phase where most multi-token answers were delivery-bound (the commonest sign
    named); else None. A one-token answer cannot show either sign and is not counted."""
    total = 0
    kinds: Counter[str] = Counter()
    firsts: list[int] = []
    for rec in records:
        if not rec.ok or len(rec.token_ns) < 2:
            continue
        total += 1
        if rec.delivery:
            kinds[rec.delivery] += 1
            firsts.append(rec.first_read_tokens)
    flagged = sum(kinds.values())
    if not total or flagged * 2 <= total:
        return None
    kind = kinds.most_common(1)[0][0]
    return f"{_WHAT[kind].format(n=kinds[kind], total=total, k=int(median(firsts)))}: {CAUSE}"


# the name the run's phase entries call (kept: the burst rule is one case of the delivery check)
burst_warning = delivery_warning
