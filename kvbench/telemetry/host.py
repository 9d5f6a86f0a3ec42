"""This host's network and disk counters from /proc, named as node-exporter names them.

The report reads a node-exporter and this host alike (node_network_receive_bytes_total{device},
node_disk_read_bytes_total{device}, ...). Reading two small files is cheap and never blocks on a
network, so the sampler reads them on its own loop. Loopback and partitions are left out: lo is not
the wire, and a partition's sectors are counted again in its disk's.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

SampleKey = tuple[str, tuple[tuple[str, str], ...]]

NET_DEV = Path("/proc/net/dev")
DISKSTATS = Path("/proc/diskstats")
SYS_BLOCK = Path("/sys/block")
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


def parse_net_dev(text: str) -> dict[SampleKey, float]:
    """Received and transmitted bytes per interface (lo left out)."""
    out: dict[SampleKey, float] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 9 or name.strip() == "lo":
            continue
        dev = (("device", name.strip()),)
        out[("node_network_receive_bytes_total", dev)] = float(fields[0])
        out[("node_network_transmit_bytes_total", dev)] = float(fields[8])
    return out


def parse_diskstats(text: str, whole_disks: set[str] | None = None) -> dict[SampleKey, float]:
    """Read and written bytes per disk; `whole_disks` (names under /sys/block) drops partitions."""
    out: dict[SampleKey, float] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        name = fields[2]
        if whole_disks is not None and name not in whole_disks:
            continue
        if name.startswith(("loop", "ram")):
            continue
        dev = (("device", name),)
        out[("node_disk_read_bytes_total", dev)] = float(fields[5]) * SECTOR
        out[("node_disk_written_bytes_total", dev)] = float(fields[9]) * SECTOR
    return out


def read_host() -> dict[SampleKey, float]:
    """This host's counters now ({} where /proc has neither file: not Linux)."""
    out: dict[SampleKey, float] = {}
    with contextlib.suppress(OSError):
        out.update(parse_net_dev(NET_DEV.read_text()))
    with contextlib.suppress(OSError):
        disks = {p.name for p in SYS_BLOCK.iterdir()} if SYS_BLOCK.is_dir() else None
        out.update(parse_diskstats(DISKSTATS.read_text(), disks))
    return out
