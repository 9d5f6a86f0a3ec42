"""The pure pieces of the Ray backends, without Ray: placement, clock offsets, how a noise section
divides over clients, reachability of the sinks, and the one-line error when Ray is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.cluster.clock import estimate_offset
from kvbench.cluster.placement import NodeInfo, is_loopback, place
from kvbench.errors import UsageError
from kvbench.noise.ray_plan import client_configs, client_target
from kvbench.scenario import FioNoise, Iperf3Noise, TcpNoise, load_scenario, parse_cluster_flag

ROOT = Path(__file__).resolve().parents[2]
HEAD = NodeInfo("a-head", "10.0.0.1", "head", 4)
N1 = NodeInfo("b-one", "10.0.0.2", "one", 4)
N2 = NodeInfo("c-two", "10.0.0.3", "two", 2)
NODES = [HEAD, N1, N2]


def test_spread_is_one_per_node_while_nodes_last_the_drivers_node_last() -> None:
    got = place(4, NODES, "spread", cpus_per_client=1, avoid={"a-head"})
    assert [n.hostname for n in got] == ["one", "two", "head", "one"]
    assert [n.hostname for n in place(2, NODES, "spread", cpus_per_client=1)] == ["head", "one"]
    # noise also avoids the load workers' nodes: the measured load keeps its NIC while nodes last
    got = place(3, NODES, "spread", cpus_per_client=1, avoid={"a-head", "b-one"})
    assert [n.hostname for n in got] == ["two", "head", "one"]


def test_pack_fills_a_node_up_to_its_cpus_first() -> None:
    got = place(7, NODES, "pack", cpus_per_client=1, avoid={"a-head"})
    assert [n.hostname for n in got] == ["one"] * 4 + ["two"] * 2 + ["head"]
    # beyond the cluster's capacity: round-robin again (Ray queues them; the deadline records them)
    got = place(12, NODES, "pack", cpus_per_client=1, avoid={"a-head"})
    assert len(got) == 12 and got[10:] == [N1, N2]
    assert place(3, NODES, "pack", cpus_per_client=0) == [HEAD] * 3
    assert place(0, NODES, "spread", cpus_per_client=1) == []
    with pytest.raises(ValueError):
        place(1, [], "spread", cpus_per_client=1)


def test_clock_offset_is_the_midpoint_of_the_shortest_round_trip() -> None:
    # remote clock = driver clock - 1_000_000 ns; round trips of 400, 100 and 900 ns
    samples = [
        (10_000, 10_200 - 1_000_000, 10_400),
        (20_000, 20_050 - 1_000_000, 20_100),
        (0, 300 - 1_000_000, 900),
    ]
    off = estimate_offset(samples)
    assert (off.offset_ns, off.rtt_ns, off.uncertainty_ns, off.rounds) == (1_000_000, 100, 50, 3)
    assert off.to_driver(5) == 1_000_005
    assert set(off.record()) == {"clock_offset_ns", "clock_rtt_ns", "clock_uncertainty_ns", "clock_rounds"}
    with pytest.raises(ValueError):
        estimate_offset([])


def test_tcp_clients_share_the_rate_and_rotate_the_sinks() -> None:
    cfg = TcpNoise(targets=["a:1", "b:2"], senders=2, rate_bytes_per_s=8e9)
    got = client_configs(cfg, 4)
    assert [c["targets"] for c in got] == [["a:1", "b:2"], ["b:2", "a:1"]] * 2
    assert {c["rate_bytes_per_s"] for c in got} == {2e9} and {c["senders"] for c in got} == {2}
    assert [client_target("tcp", c) for c in got] == [2e9] * 4
    # no targets: the mock's fabric (the default); none at all is the local one-line error
    assert client_configs(TcpNoise(), 2, ("127.0.0.1:9",))[1]["targets"] == ["127.0.0.1:9"]
    with pytest.raises(UsageError, match=r"^noise.targets: .*explicit target"):
        client_configs(TcpNoise(), 2)
    assert client_target("tcp", client_configs(TcpNoise(targets=["a:1"]), 2)[0]) is None


def test_iperf3_servers_are_dealt_out_one_client_per_server() -> None:
    cfg = Iperf3Noise(servers=["s1", "s2", "s3"], parallel=2, bitrate="8G")
    got = client_configs(cfg, 2)
    assert [c["servers"] for c in got] == [["s1", "s3"], ["s2"]]
    assert [client_target("iperf3", c) for c in got] == [4e9, 2e9]  # 8 Gbit/s x 2 streams / 8, per server
    with pytest.raises(UsageError) as exc:
        client_configs(cfg, 4)
    assert exc.value.message.startswith("noise.servers: 4 iperf3 clients need at least 4 servers")


def test_fio_clients_contend_on_the_same_path(tmp_path) -> None:
    got = client_configs(FioNoise(path=str(tmp_path)), 3)
    assert {c["path"] for c in got} == {str(tmp_path)} and client_target("fio", got[0]) is None


@pytest.mark.parametrize(
    ("host", "loop"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("localhost", True),
        ("10.0.0.1", False),
        ("sink.example", False),
    ],
)
def test_loopback_sinks_are_recognised(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_without_ray_asking_for_it_is_one_line_saying_how_to_install() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from kvbench.errors import UsageError\n"
        "from kvbench.noise import noise_generator\n"
        "from kvbench.scenario import TcpNoise\n"
        "try:\n"
        "    noise_generator(TcpNoise(targets=['h:1']), phase='p', writer=None, origin_ns=0, cluster='ray')\n"
        "except UsageError as e:\n"
        "    print(e.exit_code, e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout == (
        "2 noise on a Ray cluster needs Ray, which is not installed: pip install 'kvbench[ray]'\n"
    )


def test_the_noise_package_stays_import_light_with_the_ray_kinds_registered() -> None:
    code = "import sys, kvbench.noise as n; print(n.noise_kinds('ray')); print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split("\n")[:2] == ["('none', 'tcp', 'iperf3', 'fio')", "False"]


def _cli(tmp_path, *args: str, hide_ray: bool = False) -> subprocess.CompletedProcess[str]:
    code = (
        ("import sys; sys.modules['ray'] = None\n" if hide_ray else "import sys\n")
        + f"sys.argv = ['kvbench', *{list(args)!r}]\n"
        + "from kvbench.cli import main\nmain()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)


def test_cluster_ray_without_ray_is_exit_2_in_one_line_before_anything_runs(tmp_path) -> None:
    out = _cli(tmp_path, "run", "throughput", "--cluster", "ray", "--output-dir", "runs", hide_ray=True)
    assert out.returncode == 2
    assert out.stderr == (
        "kvbench: cluster.backend: ray needs Ray, which is not installed: pip install 'kvbench[ray]'\n"
    )
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_cluster_flag_and_section_are_checked(tmp_path) -> None:
    out = _cli(tmp_path, "run", "throughput", "--cluster", "k8s")
    assert out.returncode == 2 and out.stderr.strip() == (
        "kvbench: --cluster 'k8s': expected local, ray or ray://HOST:PORT"
    )
    for keys, message in [
        ({"noise.clients": 4}, "noise.clients: more than one noise client needs cluster.backend: ray"),
        ({"cluster.address": "ray://nowhere"}, "is not auto, ray://HOST:PORT or HOST:PORT"),
    ]:
        with pytest.raises(UsageError) as exc:
            load_scenario("throughput", keys)
        assert message in exc.value.message and "\n" not in exc.value.message
    scn, _ = load_scenario(
        "throughput",
        {
            "cluster.backend": "ray",
            "cluster.address": "ray://head:10001",
            "noise.clients": 4,
            "load.workers": 2,
        },
    )
    assert (scn.cluster.address, scn.noise.clients, scn.load.workers) == ("ray://head:10001", 4, 2)
    assert load_scenario("throughput", {"load.workers": 2})[0].load.workers == 2  # local worker processes
    assert parse_cluster_flag("ray://h:1") == {"cluster.backend": "ray", "cluster.address": "ray://h:1"}


class _RefusingRay:
    """A `ray` whose cluster refuses the connection, as a token-protected one does without a token."""

    __version__ = "test"

    @staticmethod
    def is_initialized() -> bool:
        return False

    @staticmethod
    def init(*args, **kwargs) -> None:
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.9:6379")

    @staticmethod
    def shutdown() -> None:
        pass


@pytest.mark.parametrize(
    ("address", "auth_mode", "hint"),
    [("10.0.0.9:6379", None, True), ("10.0.0.9:6379", "token", False), ("ray://10.0.0.9:10001", None, True)],
)
def test_a_refused_connection_names_rays_token_auth_when_it_was_not_asked_for(
    monkeypatch, address: str, auth_mode: str | None, hint: bool
) -> None:
    from kvbench.cluster import session

    monkeypatch.setitem(sys.modules, "ray", _RefusingRay)
    monkeypatch.setattr(session, "_SESSION", None)
    if auth_mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", auth_mode)
    with pytest.raises(UsageError) as exc:
        session.connect(address, ship_code=False)
    msg = exc.value.message
    assert msg.startswith(f"cluster.address: cannot connect to Ray at {address}: Failed to connect")
    assert ("RAY_AUTH_MODE=token" in msg) is hint and "\n" not in msg
