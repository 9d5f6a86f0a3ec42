"""The link: a network namespace for the storage side, a veth pair into it, shaped with tc.

Both ends get the same qdisc, because the two directions carry different traffic: host -> storage
carries slot saves (and iperf3/tcp noise toward the sinks), storage -> host carries slot restores
and the neighbour's reads. Shaping only one end would leave restores unlimited.

The qdisc is netem (rate + delay) where the kernel has sch_netem; otherwise tbf (rate only) and the
delay is recorded as not shaped, with the reason. Addresses are one link-local /30
(169.254.B.0/30): the namespace has no other interface and no default route, the host gains only
the connected /30 route, so nothing the lab starts can reach or be reached beyond the pair.
"""

from __future__ import annotations

from kvbench.lab.config import NETNS, VETH_HOST, VETH_NS, LabConfig, LinkShape
from kvbench.lab.system import in_ns, run

DEFAULT_DELAY_MS = 0.2


def _burst_bytes(rate_mbit: float) -> int:
    # one millisecond of line rate, at least 16 KiB: enough for a GSO segment at any sane rate
    return max(16 * 1024, int(rate_mbit * 1e6 / 8 / 1000))


def qdisc_args(rate_mbit: float, delay_ms: float | None) -> list[str]:
    """`tc qdisc add dev X root ...` arguments after `root` for the link's shape."""
    if delay_ms is not None:
        # netem's own rate limit keeps delay and bandwidth in one qdisc; the limit (packets) holds
        # a bandwidth-delay product of queue at any rate up to 100 Gbit/s
        return ["netem", "delay", f"{delay_ms:g}ms", "rate", f"{rate_mbit:g}mbit", "limit", "10000"]
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(_burst_bytes(rate_mbit)), "latency", "20ms"]


def up_commands(cfg: LabConfig, delay_ms: float | None) -> list[list[str]]:
    """Every command that builds the shaped link, in order (pure: unit-tested)."""
    shape = qdisc_args(cfg.rate_mbit, delay_ms)
    return [
        ["ip", "netns", "add", NETNS],
        ["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS, "netns", NETNS],
        ["ip", "addr", "add", f"{cfg.host_addr}/30", "dev", VETH_HOST],
        ["ip", "link", "set", VETH_HOST, "up"],
        in_ns(NETNS, ["ip", "link", "set", "lo", "up"]),
        in_ns(NETNS, ["ip", "addr", "add", f"{cfg.ns_addr}/30", "dev", VETH_NS]),
        in_ns(NETNS, ["ip", "link", "set", VETH_NS, "up"]),
        ["tc", "qdisc", "add", "dev", VETH_HOST, "root", *shape],
        in_ns(NETNS, ["tc", "qdisc", "add", "dev", VETH_NS, "root", *shape]),
    ]


def quiet_ipv6_commands() -> list[list[str]]:
    """No IPv6 link-local addresses on the pair: the /30 is the only address the lab uses."""
    return [
        ["ip", "link", "set", "dev", VETH_HOST, "addrgenmode", "none"],
        in_ns(NETNS, ["ip", "link", "set", "dev", VETH_NS, "addrgenmode", "none"]),
    ]


def down_commands() -> list[list[str]]:
    """Deleting the host end removes the pair and both qdiscs; then the namespace goes."""
    return [["ip", "link", "del", VETH_HOST], ["ip", "netns", "del", NETNS]]


def resolve_delay(cfg: LabConfig, netem: bool) -> tuple[float | None, str]:
    """The delay to apply and, when none is, why. An explicit delay without netem is an error."""
    from kvbench.lab.system import LabUnavailable

    if cfg.delay_ms is not None and cfg.delay_ms > 0 and not netem:
        raise LabUnavailable(
            f"--delay-ms {cfg.delay_ms:g}: the kernel has no sch_netem (tc qdisc netem), so the link "
            "cannot add delay; rerun with --delay-ms 0 (bandwidth shaping only)"
        )
    if cfg.delay_ms == 0:
        return None, "delay 0 requested"
    if not netem:
        return None, "not shaped: the kernel has no sch_netem (tc qdisc netem); bandwidth only (tbf)"
    return (cfg.delay_ms if cfg.delay_ms is not None else DEFAULT_DELAY_MS), ""


def link_up(cfg: LabConfig, netem: bool) -> LinkShape:
    delay, note = resolve_delay(cfg, netem)
    for argv in up_commands(cfg, delay):
        run(argv)
    for argv in quiet_ipv6_commands():
        run(argv, check=False)
    return LinkShape(
        rate_mbit=cfg.rate_mbit,
        delay_ms=delay,
        qdisc="netem" if delay is not None else "tbf",
        host_addr=cfg.host_addr,
        ns_addr=cfg.ns_addr,
        note=note,
    )


def link_exists() -> dict[str, bool]:
    """Which of the link's pieces exist now (namespace, host veth), found by name."""
    netns = run(["ip", "netns", "list"], check=False).stdout.split()
    veth = run(["ip", "link", "show", VETH_HOST], check=False).returncode == 0
    return {"netns": NETNS in netns, "veth": veth}


def qdisc_line() -> str:
    """The host end's root qdisc as tc prints it (status shows it as proof of the shape)."""
    out = run(["tc", "qdisc", "show", "dev", VETH_HOST], check=False).stdout.strip()
    return out.splitlines()[0] if out else ""
