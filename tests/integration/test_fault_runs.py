"""Every mock fault mode, run through kvbench: each request still ends as exactly one row, with its error."""

import pytest

from kvbench.mock.spawn import spawned_mock
from kvbench.results import load_run, read_manifest
from kvbench.run.runner import RunOptions, run_scenario
from kvbench.scenario import load_scenario

pytestmark = pytest.mark.slow

SMALL = {
    "prompts.count": 3,
    "prompts.lengths": [500],
    "load.requests": 6,
    "load.concurrency": 2,
    "cache.reset": "never",  # cold by salt alone: a faulty probe must not stop the run
}

# (mock fault flags, scenario overrides, the error type kvbench must record)
FAULTS = [
    (["error_rate=1", "error_status=500"], {}, "http_500"),
    (["error_rate=1", "error_status=503"], {}, "http_503"),
    (["rate_limit=1", "retry_after_s=1"], {}, "http_429"),
    (["close_after_tokens=3", "every=2"], {}, "stream_truncated"),
    (["bad_sse", "every=2"], {}, "bad_sse"),
    (["bad_json", "every=2"], {}, "bad_json"),
    (["stall_first_token_s=3", "every=2"], {"target.timeouts.first_token_s": 1}, "timeout_first_token"),
    (["stall_mid_stream_s=3", "every=2"], {"target.timeouts.total_s": 1.5}, "timeout_total"),
    (["giant_chunk_bytes=12000000", "every=2"], {}, "response_too_large"),
    (["endless_stream", "every=2"], {"target.timeouts.total_s": 1.5}, "timeout_total"),
]


async def run_against(faults, overrides, tmp_path, **opts):
    async with spawned_mock(profile="ci", faults=faults) as mock:
        scn, _ = load_scenario("throughput", {**SMALL, "target.base_url": mock.base_url, **overrides})
        outcome = await run_scenario(scn, RunOptions(output_dir=tmp_path, quiet=True, report=False, **opts))
    return outcome, load_run(outcome.run_dir), read_manifest(outcome.run_dir)


@pytest.mark.parametrize(
    ("faults", "overrides", "error_type"), FAULTS, ids=[f[2] + ":" + f[0][0] for f in FAULTS]
)
async def test_fault_becomes_a_row(tmp_path, faults, overrides, error_type):
    outcome, df, manifest = await run_against(faults, overrides, tmp_path)
    assert outcome.status == "complete"
    assert len(df) == 6 and df.request_id.is_unique  # one row per request, none lost, none doubled
    failed = df[df.status == "error"]
    assert len(failed) >= 3
    assert set(failed.error_type) == {error_type}
    assert failed.error_message.notna().all()
    assert manifest["error_counts"] == {error_type: len(failed)}
    assert outcome.exit_code == 1  # max_error_rate defaults to 0
    if error_type in ("stream_truncated", "bad_sse", "bad_json", "timeout_total"):
        assert (failed.output_chars > 0).all()  # partial output is counted
    if len(failed) < 6:
        assert (df[df.status == "ok"].output_tokens == 16).all()


async def test_error_rate_within_budget_exits_zero(tmp_path):
    outcome, df, _ = await run_against(["close_after_tokens=2", "every=2"], {"max_error_rate": 0.6}, tmp_path)
    assert (df.status == "error").sum() == 3
    assert outcome.exit_code == 0


@pytest.mark.timing
async def test_server_exiting_mid_run(tmp_path):
    # request 1 is preflight's timed probe; the measured requests are 2 and on
    outcome, df, _manifest = await run_against(["exit_after_requests=3"], {}, tmp_path)
    assert outcome.status == "complete" and len(df) == 6
    assert (df.status == "ok").sum() == 2
    assert set(df[df.status == "error"].error_type) <= {"connect_error", "stream_truncated"}
    assert outcome.exit_code == 1


async def test_retries_are_opt_in_and_recorded(tmp_path):
    # one connection: the server's 3rd, 6th... requests fail (its 1st is preflight's timed probe),
    # so each retry (the next request) succeeds
    overrides = {"retries": 2, "load.concurrency": 1}
    _outcome, df, manifest = await run_against(["close_after_tokens=2", "every=3"], overrides, tmp_path)
    assert len(df) == 6 and (df.status == "ok").all()  # the final attempt is the row
    assert set(df.attempt) == {1, 2}
    assert manifest["options"]["retries"] == 2
