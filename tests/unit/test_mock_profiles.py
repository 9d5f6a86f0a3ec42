"""Shipped mock profiles validate; strict models; overrides; fault flags; the CLI."""

import pytest
import typer
from typer.testing import CliRunner

from kvbench.errors import UsageError
from kvbench.mock.config import FixedDelayProfile, TieredProfile
from kvbench.mock.costs.timing import derive_params
from kvbench.mock.faults import FaultPlan, parse_fault_flags
from kvbench.mock.profiles import list_profiles, load_profile, validate_profile


def test_every_shipped_profile_validates_and_resolves():
    names = [n for n, _ in list_profiles()]
    assert {"ibm-g4", "ci", "laptop", "fixed-delay"} <= set(names)
    for name, desc in list_profiles():
        assert desc and "\n" not in desc
        p = load_profile(name)
        assert p.name == name
        if isinstance(p, TieredProfile):
            derive_params(p)
        else:
            assert isinstance(p, FixedDelayProfile)


def test_ibm_g4_keeps_calibration_inputs_not_coefficients():
    p = load_profile("ibm-g4")
    assert p.gpu.prefill_linear_s_per_token is None and p.tiers.G4.latency_s is None
    assert p.calibration is not None
    assert [pt.ttft_s for pt in p.calibration.uncached] == [2.59, 32.14]
    assert [pt.ttft_s for pt in p.calibration.cached] == [0.193, 0.57]
    assert not p.tiers.G1.enabled and not p.tiers.G2.enabled and p.tiers.G4.enabled


def test_laptop_has_all_tiers_on():
    p = load_profile("laptop")
    assert all(p.tiers.by_name(t).enabled for t in ("G1", "G2", "G3", "G4"))


def test_unknown_fields_and_profiles_are_rejected():
    data = load_profile("laptop").model_dump()
    data["bogus"] = 1
    with pytest.raises(UsageError, match="bogus"):
        validate_profile(data)
    with pytest.raises(UsageError, match="unknown profile 'nope'"):
        load_profile("nope")
    with pytest.raises(UsageError):
        load_profile("ci", {"time_scale": -1})


def test_fabric_names_a_topology_or_its_one_link_and_knobs_default_off():
    g4 = load_profile("ibm-g4")
    assert g4.fabric.topology == "ibm-g4" and g4.fabric.capacity_bytes_per_s is None
    assert g4.tiers.G4.aggregate_bandwidth_bytes_per_s is None  # the topology's storage_read
    c = g4.fabric.contention
    assert (c.loaded_latency_s, c.storage_cpu_slowdown, c.incast_loss) == (0.0, 0.0, 0.0)
    assert load_profile("ci", {"fabric.contention.incast_loss": 0.3}).fabric.contention.incast_loss == 0.3
    for bad, match in [
        ({"fabric.topology": "nope"}, "unknown 'nope'"),
        ({"fabric.capacity_bytes_per_s": 1e9}, "comes from the topology"),
        ({"tiers.G4.aggregate_bandwidth_bytes_per_s": 1e9}, "leave it null"),
        ({"fabric.contention.incast_loss": 1.5}, "incast_loss"),
        ({"fabric.floor_fraction": 0.1}, "floor_fraction"),  # max-min fairness replaced the floor
    ]:
        with pytest.raises(UsageError, match=match):
            load_profile("ci", bad)
    with pytest.raises(UsageError, match="give topology"):
        load_profile("laptop", {"fabric.capacity_bytes_per_s": None})


def test_overrides():
    assert load_profile("fixed-delay", {"ttft_ms": 20}).ttft_ms == 20
    assert load_profile("ci", {"tiers.G4.enabled": False}).tiers.G4.enabled is False


def test_fault_flags():
    cfg = parse_fault_flags(["error_rate=0.2", "error_status=503", "bad_sse", "every=2"])
    assert cfg.error_rate == 0.2 and cfg.error_status == 503 and cfg.bad_sse and cfg.every == 2
    with pytest.raises(UsageError, match=r"--fault: unknown fault 'x' \(known: "):
        parse_fault_flags(["x=1"])
    with pytest.raises(UsageError, match="error_status"):
        parse_fault_flags(["error_status=404"])
    plan = FaultPlan(parse_fault_flags(["bad_json", "every=3"]))
    assert [plan.next().stream_faults for _ in range(6)] == [False, False, True, False, False, True]
    plan = FaultPlan(parse_fault_flags(["error_rate=0.5", "seed=1"]))
    draws = [plan.next().error_status for _ in range(40)]
    assert 5 < draws.count(500) < 35
    plan2 = FaultPlan(parse_fault_flags(["error_rate=0.5", "seed=1"]))
    assert draws == [plan2.next().error_status for _ in range(40)]


def test_cli_profiles_and_bad_fault():
    from kvbench.mock.commands import register

    app = typer.Typer()

    @app.callback()
    def root() -> None:
        pass

    register(app)
    runner = CliRunner()
    result = runner.invoke(app, ["mock", "profiles"])
    assert result.exit_code == 0, result.output
    assert "ibm-g4" in result.output and "fixed-delay" in result.output
    result = runner.invoke(app, ["mock", "serve", "--fault", "nope"])
    assert isinstance(result.exception, UsageError)
    assert "unknown fault 'nope'" in result.exception.message
    result = runner.invoke(app, ["mock", "serve", "--help"])
    assert result.exit_code == 0 and "--fabric-port" in result.output


def test_override_profile_is_public_and_validates():
    from kvbench.mock.profiles import override_profile

    base = load_profile("ci")
    assert override_profile(base, None) is base
    faster = override_profile(base, {"time_scale": 0.5})
    assert faster.time_scale == 0.5 and base.time_scale != 0.5  # a copy: the model is frozen data
    with pytest.raises(UsageError, match="is not a section"):
        override_profile(base, {"time_scale.x": 1})
    with pytest.raises(UsageError, match="time_scale"):
        override_profile(base, {"time_scale": -1})
