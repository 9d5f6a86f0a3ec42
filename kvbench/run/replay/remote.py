"""The replay on load workers (`test.workers: K`: Ray actors with `cluster.backend: ray`, else K local
worker processes): the trace's requests prepared here and sent from the workers, through the
RemoteLoadBackend seam (kvbench.run.remote).

Both backends prepare a whole phase's bodies before it starts (each worker's share up front,
kvbench.load.ray_backend / local_workers run_items), and in their own order (round robin over the
workers), so here the realised rows are kept until asked for: there the feed's window does not
bound memory (select fewer rows with trace.limit / window_ms for a very long trace). Rows are
recorded on the driver as they come back, with the replay row beside each (the same as a local
replay).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kvbench.client import RequestRecord, build_body
from kvbench.load.ray_backend import PreparedRequest
from kvbench.load.schedule import WorkItem
from kvbench.run.context import Run, with_max_tokens
from kvbench.run.remote import RunPhase
from kvbench.traces.realise import Realised

Done = Callable[[RequestRecord, Realised, float, int], None]


class ReplayRemotePhase(RunPhase):
    """A replay phase for a remote backend: each item's prompt realised here, its row recorded here."""

    def __init__(
        self,
        run: Run,
        *,
        name: str,
        label: str,
        realised: Iterator[Realised],
        max_tokens: Callable[[Realised], int],
        done: Done,
        count_source: str,
    ) -> None:
        super().__init__(run, name=name, label=label, repetition=0, noisy=False, prompts=[], texts=None)
        self._it = realised
        self._waiting: dict[int, Realised] = {}  # realised, not yet asked for (another worker's share)
        self._sent: dict[str, tuple[Realised, float, int]] = {}
        self._max_tokens, self._done, self._source = max_tokens, done, count_source

    def _realised(self, index: int) -> Realised:
        while index not in self._waiting:
            r = next(self._it)
            self._waiting[r.index] = r
        return self._waiting.pop(index)

    def prepare(self, item: WorkItem) -> PreparedRequest:
        run = self.run
        r = self._realised(item.index)
        max_tokens = self._max_tokens(r)
        run.seq += 1
        request_id = f"{run.rd.run_id[-6:]}-{self.name}-{run.seq}"
        self._sent[request_id] = (r, item.scheduled_offset_s, max_tokens)
        fields: dict[str, Any] = {
            "phase": self.name,
            "label": self.label,
            "repetition": 0,
            "prompt_id": r.index,
            "prompt_tokens_requested": r.row.input_length,
            "prompt_tokens": r.tokens,
            "noise_active": False,
        }
        body = build_body(with_max_tokens(run.client.cfg, max_tokens), r.text)
        return PreparedRequest(
            request_id=request_id, fields=fields, body=body, offset_s=item.scheduled_offset_s
        )

    def record(self, rec: RequestRecord, extra: dict[str, Any]) -> None:
        super().record(rec, extra)
        sent = self._sent.pop(rec.request_id, None)
        if sent is not None:
            self._done(rec, *sent)
