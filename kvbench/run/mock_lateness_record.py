"""The embedded mock's own lateness into the manifest, once the mock has stopped.

A time-scaled run on a slow or busy machine can make the mock's own work (reading a long body,
timers its loop woke late) a real part of every TTFT. The report has long said so per phase
(kvbench.report.mock_lateness); the manifest says it too, so a reader of results who never opens
the report (pandas, a sweep's table, a twin's fit) sees which phases were partly the machine. Read
after the mock process has exited: only then is its ground-truth file complete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.report.mock_lateness import GROUND_TRUTH, LATE_SHARE, phase_lateness
from kvbench.results import read_jsonl
from kvbench.results.files import REQUESTS, WriteFailed
from kvbench.results.schema import Label, MockLateness, MockPhaseLateness

if TYPE_CHECKING:
    from kvbench.run.context import Run


def record_mock_lateness(run: Run) -> str | None:
    """Write `mock_lateness` into the manifest of a run on the embedded mock; the warning line when
    a measured phase's lateness passed LATE_SHARE of its modelled TTFT (None otherwise)."""
    if run.target.kind != "mock" or run.rd.manifest is None:
        return None
    truth = read_jsonl(run.rd.path / GROUND_TRUTH)
    rows = read_jsonl(run.rd.path / REQUESTS)
    if not truth or not rows:
        return None
    probes = {str(r.get("phase")) for r in rows if r.get("label") == Label.PROBE.value}
    phases = [
        MockPhaseLateness(
            phase=p.phase,
            requests=p.requests,
            late_ms_mean=p.late_ms_mean,
            late_ms_p99=p.late_ms_p99,
            modelled_ttft_ms_mean=p.modelled_ttft_ms_mean,
            share=p.share,
            exceeded=p.exceeded and p.phase not in probes,
        )
        for p in phase_lateness(rows, truth)
    ]
    late = [p.phase for p in phases if p.exceeded]
    run.rd.update(mock_lateness=MockLateness(threshold_share=LATE_SHARE, phases=phases, exceeded_phases=late))
    try:
        run.rd.save_manifest()
    except WriteFailed as exc:  # the run's own files are whole; this addition is what is lost
        return f"mock lateness not recorded: {exc}"
    if not late:
        return None
    worst = max((p for p in phases if p.exceeded), key=lambda p: p.share)
    return (
        f"WARNING: the mock's own lateness passed {LATE_SHARE:.0%} of the modelled TTFT in "
        f"{len(late)} phase(s) ({', '.join(late[:4])}{', ...' if len(late) > 4 else ''}; worst "
        f"{worst.phase}: {worst.share:.0%}): their TTFT is partly this machine, not the model "
        "(manifest mock_lateness; run at a slower pace, target.mock_overrides.time_scale)"
    )
