"""The lab's link counters: bytes and packets through the host end of its veth pair, from sysfs.

The kvbench lab (kvbench.lab.link) puts G4 storage behind a veth pair shaped with tc; the run
layer names the pair's host end (kvbench.lab.manifest.lab_link_interfaces) and the sampler reads
it here every `telemetry.interval_s`. Only the host end is read: a veth's peer counts the same
bytes the other way round (what one end transmits the other receives), and the peer lives in the
lab's namespace, which only a process that enters it could read. So receive = storage -> host
(G4 restores, the neighbour's reads), transmit = host -> storage (slot saves, iperf3 noise).

/sys/class/net/<if>/statistics is the kernel's own count (what /proc/net/dev shows too), one
small file per number: no parsing of a table, and an interface that went away is one missing
file, not a wrong row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SampleKey = tuple[str, tuple[tuple[str, str], ...]]

SYS_NET = Path("/sys/class/net")
# sysfs file -> series name (node-exporter's spelling, under the lab's own prefix)
STATS = {
    "rx_bytes": "kvbench_lab_link_receive_bytes_total",
    "tx_bytes": "kvbench_lab_link_transmit_bytes_total",
    "rx_packets": "kvbench_lab_link_receive_packets_total",
    "tx_packets": "kvbench_lab_link_transmit_packets_total",
    "rx_dropped": "kvbench_lab_link_receive_drop_total",
    "tx_dropped": "kvbench_lab_link_transmit_drop_total",
}


def read_link(interfaces: Sequence[str], root: Path | None = None) -> dict[SampleKey, float]:
    """Each interface's counters now; an interface (or a file) that is not there is left out."""
    out: dict[SampleKey, float] = {}
    for dev in interfaces:
        stats = (root or SYS_NET) / dev / "statistics"
        for fname, name in STATS.items():
            try:
                value = float((stats / fname).read_text().strip())
            except (OSError, ValueError):
                continue
            out[(name, (("device", dev),))] = value
    return out
