"""The one topology model: named links, max-min fair sharing per flow, the published set-up."""

import pytest

from kvbench.model.topology import (
    OTHER_MECHANISMS,
    PRESETS,
    PUBLISHED_G4,
    Contention,
    Flow,
    Link,
    Topology,
    bandwidth_drop,
    from_capacities,
    max_min_fair,
    two_links,
)


def test_max_min_fair_gives_small_flows_their_demand_and_splits_the_rest():
    # one 10-unit link: a flow asking 2 gets 2, two elastic ones split the other 8
    rates = max_min_fair({"a": 10.0}, [Flow(("a",), 2.0), Flow(("a",)), Flow(("a",))])
    assert rates == pytest.approx([2.0, 4.0, 4.0])


def test_max_min_fair_on_two_links_frees_capacity_a_bottlenecked_flow_cannot_use():
    # flow 0 crosses a (10) and b (2); flow 1 only a: flow 0 is held to 2 by b, flow 1 takes 8 of a
    rates = max_min_fair({"a": 10.0, "b": 2.0}, [Flow(("a", "b")), Flow(("a",))])
    assert rates == pytest.approx([2.0, 8.0])


def test_no_link_carries_more_than_its_capacity_however_much_is_offered():
    flows = [Flow(PUBLISHED_G4.noise_path, 1e15)] * 7 + [Flow(PUBLISHED_G4.cache_path)] * 3
    caps = PUBLISHED_G4.capacities()
    rates = max_min_fair(caps, flows)
    for name, cap in caps.items():
        assert sum(r for f, r in zip(flows, rates, strict=True) if name in f.path) <= cap * (1 + 1e-9)


def test_the_published_set_up_names_its_links_in_bytes_per_second():
    t = PRESETS["ibm-g4"]
    assert t is PUBLISHED_G4
    assert t.capacity("client_net") == 80e9 and t.capacity("storage_read") == 315e9
    assert t.shared_link == "storage_read" and t.client_link == "client_net"
    assert t.cache_bandwidth == 80e9
    assert t.noise_clients == 4 and t.noise_offered_bytes_per_s == 200e9
    assert all(ln.description for ln in t.links)


def test_published_noise_achieves_what_it_offers_and_leaves_the_reads_all_they_had():
    t = PUBLISHED_G4
    noise = [t.noise_offered_bytes_per_s / t.noise_clients] * t.noise_clients
    s = t.share(28, 10e9, noise)
    assert s.noise_offered == s.noise_achieved == pytest.approx(200e9)
    assert s.cache_total == pytest.approx(t.share(28, 10e9, []).cache_total) == pytest.approx(80e9)
    assert s.noise_load == pytest.approx(200 / 315)
    assert t.cache_left(noise) == t.cache_left([]) == pytest.approx(80e9)
    assert bandwidth_drop(t, 17.6e9, 200e9, 4) == pytest.approx(0.0, abs=1e-9)


def test_noise_beyond_the_storage_takes_only_its_fair_share():
    t = PUBLISHED_G4
    s = t.share(1, None, [1e15] * 4)  # one elastic read beside 4 flows offering far too much
    assert s.noise_achieved == pytest.approx(315e9 - s.cache_total)
    assert s.cache_each == pytest.approx(315e9 / 5)  # the storage is full: 5 equal shares
    assert bandwidth_drop(t, 80e9, 4e15, 4) == pytest.approx(1 - 63e9 / 80e9)


def test_contention_knobs_are_off_by_default_and_each_costs_only_under_noise():
    assert not Contention().active
    t = PUBLISHED_G4
    noise = [50e9] * 4
    incast = Contention(incast_loss=0.5)
    assert t.share(28, 10e9, [], incast).cache_total == pytest.approx(80e9)  # no noise, no loss
    assert t.share(28, 10e9, noise, incast).cache_total == pytest.approx(80e9 * (1 - 0.5 * 200 / 315))
    cpu = Contention(storage_cpu_slowdown=0.5)
    assert t.share(1, 10e9, noise, cpu).cache_each == pytest.approx(10e9 * (1 - 0.5 * 200 / 315))
    assert [m[1] for m in OTHER_MECHANISMS] == [
        "fabric.contention.loaded_latency_s",
        "fabric.contention.storage_cpu_slowdown",
        "fabric.contention.incast_loss",
    ]


def test_one_link_topology_shares_with_the_noise():
    t = two_links("lab", 5e9, 1.25e9, "one NIC")
    assert t.shared_link == "fabric"
    assert t.share(1, None, [1e12]).cache_each == pytest.approx(1.25e9 / 2)


def test_a_path_through_an_unknown_link_is_refused():
    with pytest.raises(ValueError, match="unknown links"):
        Topology("x", "", (Link("a", 1.0, ""),), ("a",), ("b",))
    with pytest.raises(ValueError, match="positive capacity"):
        Topology("x", "", (Link("a", 0.0, ""),), ("a",), ("a",))
    with pytest.raises(ValueError, match="unknown link"):
        max_min_fair({"a": 1.0}, [Flow(("b",))])


def test_an_audit_bounds_capacities_make_a_topology_with_the_same_rule():
    caps = [("storage_read_bw", 315e9, True), ("client_net_bw", 80e9, False)]
    t = from_capacities(caps)
    assert t.cache_path == ("storage_read_bw", "client_net_bw")
    assert t.noise_path == ("noise_sources", "storage_read_bw") and t.shared_link == "storage_read_bw"
    assert bandwidth_drop(t, 18.9e9, 200e9, 4) == bandwidth_drop(PUBLISHED_G4, 18.9e9, 200e9, 4) == 0.0
