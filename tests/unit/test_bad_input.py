"""Bad input: one or a few `path: message` lines on stderr, exit code 2, never a traceback."""

from pathlib import Path

import pytest

BAD = Path(__file__).resolve().parents[1] / "data" / "bad_scenarios"

EXPECTED = {
    "unknown_key.yaml": "frobnicate: unknown key",
    "wrong_type.yaml": "prompts.count: Input should be a valid integer",
    "negative_concurrency.yaml": "load.concurrency: Input should be greater than 0",
    "zero_concurrency.yaml": "load.concurrency: Input should be greater than 0",
    "empty_lengths.yaml": "prompts.lengths: must list at least one length",
    "length_above_context.yaml": "exceeds target.max_model_len 4096",
    "yaml_syntax.yaml": "YAML syntax error: line",
    "non_utf8.yaml": "not UTF-8",
    "alias_bomb.yaml": "expands to more than",
    "top_level_list.yaml": "top level must be a mapping",
    "empty.yaml": "the file is empty",
    "deep_nesting.yaml": "nested too deeply",
    "unknown_load_kind.yaml": "load: kind 'burst' is not one of",
    "ttft_with_concurrent_load.yaml": "one request at a time",
    "bad_base_url.yaml": "target.base_url: must start with http",
    "api_key_literal.yaml": "target.api_key_env: String should match pattern",
    "negative_max_tokens.yaml": "output.max_tokens: Input should be greater than 0",
    "negative_temperature.yaml": "output.temperature: Input should be greater than or equal to 0",
    "noisy_on_ttft.yaml": "test.noisy: applies to the throughput test, not ttft",
    "old_layout_warm_repeats.yaml": "cache.warm_repeats: moved to test.warm_repeats",
    "old_layout_baseline.yaml": "baseline: moved to test.baseline",
    "unknown_test.yaml": "test: kind 'chatbot' is not one of",
    "range_min_above_max.yaml": "prompts.lengths: min must not exceed max",
    "missing_name.yaml": "name: Field required",
    "unknown_api.yaml": "target.api: Input should be 'completions' or 'chat'",
    "shared_prefix_too_long.yaml": "prompts.shared_prefix_tokens: must be shorter",
    "max_error_rate_above_one.yaml": "max_error_rate: Input should be less than or equal to 1",
    "zero_noise_senders.yaml": "noise.senders: Input should be greater than 0",
    "negative_length.yaml": "prompts.lengths.1: Input should be greater than 0",
    "zero_rate.yaml": "load.rate: Input should be greater than 0",
    "iperf3_without_servers.yaml": "noise.servers: Field required",
    "empty_name.yaml": "name: String should have at least 1 character",
    "zero_timeout.yaml": "target.timeouts.first_token_s: Input should be greater than 0",
    "prompts_not_mapping.yaml": "prompts: Input should be a valid dictionary",
}


def test_every_bad_file_is_covered():
    assert {p.name for p in BAD.glob("*.yaml")} == set(EXPECTED)
    assert len(EXPECTED) >= 20


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED.items()))
def test_bad_scenario(run_cli, name, expected):
    code, _, err = run_cli("validate", str(BAD / name))
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 3, lines
    assert all(line.startswith("kvbench: ") for line in lines)
    assert any(expected in line for line in lines), lines


def test_missing_file_directory_and_huge_file(run_cli, tmp_path):
    code, _, err = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "file not found" in err
    code, _, err = run_cli("validate", str(tmp_path) + "/")
    assert code == 2 and "is a directory" in err
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: x\n" + "# padding\n" * 200_000)
    code, _, err = run_cli("validate", str(huge))
    assert code == 2 and "limited to" in err


def test_verbose_shows_the_traceback(run_cli):
    # printed (redacted, like every line) before the error's own line; the exit code stays the
    # error's, so --verbose never changes what a script sees
    code, _, err = run_cli("--verbose", "validate", str(BAD / "unknown_key.yaml"))
    assert code == 2
    assert "Traceback (most recent call last)" in err and "ScenarioError" in err
    assert err.strip().splitlines()[-1].startswith("kvbench: ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "ttft", "--lengths", "abc"], "--lengths 'abc'"),
        (["run", "ttft", "--set", "novalue"], "expected KEY=VALUE"),
        (["run", "ttft", "--concurrency", "-1", "--set", "test=throughput"], "load.concurrency"),
        (["run", "ttft", "--requests", "lots"], "Invalid value for '--requests'"),
        (["run", "no-such-scenario"], "no scenario named 'no-such-scenario'"),
        (["run", "ttft", "--api", "grpc"], "target.api"),
        (["export", "/nonexistent/run"], "not a kvbench run directory"),
    ],
)
def test_bad_cli_values(run_cli, args, expected):
    code, out, err = run_cli(*args)
    assert code == 2
    assert "Traceback" not in err
    assert expected in err + out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--set", "target.mock_profile=nosuch"],
            "target.mock_profile: unknown mock profile 'nosuch' (known: ",
        ),
        (
            ["--set", "target.mock_overrides.nosuch=1"],
            "target.mock_overrides: profile ci: nosuch: Extra inputs",
        ),
        (["--set", "target.engine=nosuch"], "target.engine: unknown engine 'nosuch'; known: auto, mock"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_unknown_names_are_one_line_before_anything_starts(run_cli, tmp_path, command, args, expected):
    """A name no registry knows is exit 2 and one line listing the known names, from `validate` and
    from `run` alike, before a mock starts or a run directory exists (it was exit 1, `mock did not
    start`, and `validate` accepted it)."""
    out_dir = ["--output-dir", str(tmp_path / "out")] if command == "run" else []
    code, _, err = run_cli(command, "ttft", *args, *out_dir)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    if "mock_profile" in expected:
        from kvbench.mock.profiles import profile_names

        assert all(name in lines[0] for name in profile_names())
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_noise_kind_the_cluster_cannot_place_is_refused(monkeypatch):
    from kvbench import noise
    from kvbench.errors import UsageError
    from kvbench.run.preflight.names import check_names
    from kvbench.scenario import load_scenario
    from kvbench.scenario.cluster import ClusterSection
    from kvbench.scenario.noise import FioNoise

    base, _ = load_scenario("throughput")
    scn = base.model_copy(update={"noise": FioNoise(path="/tmp"), "cluster": ClusterSection(backend="ray")})
    check_names(scn)  # registered for ray: fine
    monkeypatch.delitem(noise._REGISTRY, ("ray", "fio"))
    with pytest.raises(
        UsageError,
        match=r"noise.kind: unknown noise kind 'fio' on cluster 'ray' \(known: none, tcp, iperf3\)",
    ):
        check_names(scn)
