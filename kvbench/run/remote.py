"""A run on a Ray cluster, from the run's side: connect the session, and give a remote load
backend each phase's requests prepared here (kvbench.load.ray_backend.RemotePhase).

The request is made exactly as Run.issue makes it (the same id scheme, record fields, body from
the same client config), so ids stay unique across workers and a row reads the same whichever
process sent it; its row is written by Run.record, with the worker and node as extra columns.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kvbench.client import RequestRecord, build_body
from kvbench.load.prompts import Prompt
from kvbench.load.ray_backend import PreparedRequest
from kvbench.load.schedule import WorkItem
from kvbench.scenario import Scenario

if TYPE_CHECKING:
    from kvbench.cluster.session import RaySession
    from kvbench.run.context import Run


def connect_cluster(scn: Scenario) -> RaySession | None:
    """The run's Ray session (cluster.backend: ray), before anything else starts; None when local."""
    if scn.cluster.backend != "ray":
        return None
    from kvbench.cluster.session import ClusterLimits, connect

    c = scn.cluster
    limits = ClusterLimits(
        cpus_per_noise_client=c.cpus_per_noise_client,
        cpus_per_load_worker=c.cpus_per_load_worker,
        start_timeout_s=c.start_timeout_s,
    )
    return connect(c.address, ship_code=c.ship_code, limits=limits)


class RunPhase:
    """One phase's requests for a remote backend: prepared on the driver, recorded on the driver."""

    def __init__(
        self,
        run: Run,
        *,
        name: str,
        label: str,
        repetition: int,
        noisy: bool,
        prompts: list[Prompt],
        texts: list[str] | None,
    ) -> None:
        self.run = run
        self.name, self.label, self.repetition, self.noisy = name, str(label), repetition, noisy
        self.prompts, self.texts = prompts, texts
        self.retries = run.scn.retries
        self.origin_ns = run.origin_ns

    def prepare(self, item: WorkItem) -> PreparedRequest:
        run = self.run
        prompt = self.prompts[item.prompt_id]
        text = self.texts[item.prompt_id] if self.texts is not None else prompt.with_salt(run.new_salt())
        run.seq += 1
        fields = {
            "phase": self.name,
            "label": self.label,
            "repetition": self.repetition,
            "prompt_id": prompt.prompt_id,
            "prompt_tokens_requested": prompt.requested_tokens,
            "prompt_tokens": prompt.actual_tokens or prompt.requested_tokens,
            "noise_active": self.noisy,
        }
        return PreparedRequest(
            request_id=f"{run.rd.run_id[-6:]}-{self.name}-{run.seq}",
            fields=fields,
            body=build_body(run.client.cfg, text),
            offset_s=item.scheduled_offset_s,
        )

    def client_spec(self) -> dict[str, Any]:
        """How a worker builds the same timed client (config, headers, pool size, connect timeout)."""
        scn = self.run.scn
        return {
            "config": dataclasses.asdict(self.run.client.cfg),
            "headers": dict(self.run.client.user_headers),
            "concurrency": scn.load.max_in_flight,
            "connect_timeout_s": scn.target.timeouts.connect_s,
        }

    def started(self, request_id: str) -> None:
        self.run.progress.request_started()

    def record(self, rec: RequestRecord, extra: dict[str, Any]) -> None:
        self.run.progress.request_done(rec.ok)
        self.run.record(rec, extra)
