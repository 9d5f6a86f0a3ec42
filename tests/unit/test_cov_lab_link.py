"""The lab's link built and inspected with `run` stood in: the commands in their order (IPv6 quieted
without failing the build), the shape recorded for netem and tbf, and the pieces found by name."""

from __future__ import annotations

from typing import Any

import pytest

from kvbench.lab import link
from kvbench.lab.config import NETNS, VETH_HOST, LabConfig


class _Done:
    def __init__(self, returncode: int = 0, stdout: str = "") -> None:
        self.returncode = returncode
        self.stdout = stdout


def _recorder(calls: list[tuple[list[str], bool]], answers: dict[str, _Done] | None = None) -> Any:
    def run(argv: list[str], *, check: bool = True, timeout: float = 60.0) -> _Done:
        calls.append((list(argv), check))
        return (answers or {}).get(" ".join(argv), _Done())

    return run


@pytest.mark.parametrize(
    ("delay_ms", "netem", "qdisc", "applied"),
    [(None, True, "netem", link.DEFAULT_DELAY_MS), (3.0, True, "netem", 3.0), (None, False, "tbf", None)],
)
def test_link_up_runs_the_build_then_quiets_ipv6(
    monkeypatch: pytest.MonkeyPatch, delay_ms: float | None, netem: bool, qdisc: str, applied: float | None
) -> None:
    calls: list[tuple[list[str], bool]] = []
    monkeypatch.setattr(link, "run", _recorder(calls))
    cfg = LabConfig(rate_mbit=800, delay_ms=delay_ms, block=42)
    shape = link.link_up(cfg, netem)
    build = link.up_commands(cfg, applied)
    assert [c for c, _check in calls] == build + link.quiet_ipv6_commands()
    assert [check for _c, check in calls] == [True] * len(build) + [False, False]
    assert (shape.qdisc, shape.delay_ms, shape.rate_mbit) == (qdisc, applied, 800)
    assert (shape.host_addr, shape.ns_addr) == ("169.254.42.1", "169.254.42.2")
    assert (shape.note == "") is (qdisc == "netem")
    assert calls[-3][0][-len(link.qdisc_args(800, applied)) :] == link.qdisc_args(800, applied)


def test_tbf_burst_is_a_millisecond_of_line_rate_with_a_floor() -> None:
    assert link._burst_bytes(8000) == 1_000_000  # 8 Gbit/s: 1 MB per ms
    assert link._burst_bytes(1) == 16 * 1024
    assert link.qdisc_args(8000, None)[link.qdisc_args(8000, None).index("burst") + 1] == "1000000"


def test_pieces_are_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], bool]] = []
    tc_out = "qdisc tbf 8001: root refcnt 2 rate 400Mbit\nqdisc x\n"
    answers = {
        "ip netns list": _Done(stdout=f"other-ns (id: 1)\n{NETNS} (id: 0)\n"),
        f"ip link show {VETH_HOST}": _Done(returncode=1),
        f"tc qdisc show dev {VETH_HOST}": _Done(stdout=tc_out),
    }
    monkeypatch.setattr(link, "run", _recorder(calls, answers))
    assert link.link_exists() == {"netns": True, "veth": False}
    assert link.qdisc_line() == "qdisc tbf 8001: root refcnt 2 rate 400Mbit"
    assert all(check is False for _c, check in calls)  # probing never raises
    answers["ip netns list"] = _Done(stdout="kvbench-lab-old (id: 0)\n")  # a prefix is not the name
    answers[f"tc qdisc show dev {VETH_HOST}"] = _Done(stdout="")
    assert link.link_exists()["netns"] is False
    assert link.qdisc_line() == ""
