"""The SIOCETHTOOL reader against this machine's own kernel: a veth pair in a network namespace the
test makes (and removes), read by the ioctl and by Debian's ``ethtool -S`` at the same moment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from fabricwatch.ingest.nic.parsers import parse_ethtool_stats

needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("ethtool") is None,
    reason="needs root, iproute2 and ethtool (Debian's; .ci/run installs it) to make a namespace",
)
READ = """
import json, sys
from fabricwatch.ingest.nic.ethtool_ioctl import EthtoolIoctl
from fabricwatch.ingest.nic.device import EthtoolError
with EthtoolIoctl() as reader:
    out = []
    for name in sys.argv[1:]:
        try:
            out.append(reader.read(name).values)
        except EthtoolError as exc:
            out.append(str(exc))
print(json.dumps(out))
"""


def in_ns(ns: str, *cmd: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *cmd], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def veth() -> Iterator[str]:
    """A namespace holding the veth pair fw0/fw1, up; removed afterwards whatever happened."""
    ns = f"fwtest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        in_ns(ns, "ip", "link", "add", "fw0", "type", "veth", "peer", "name", "fw1")
        in_ns(ns, "ip", "link", "set", "fw0", "up")
        in_ns(ns, "ip", "link", "set", "fw1", "up")
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


def ioctl_read(ns: str, *names: str) -> list:
    return json.loads(in_ns(ns, sys.executable, "-c", READ, *names))


@needs_netns
def test_the_ioctl_reads_what_ethtool_prints(veth):
    (before,) = ioctl_read(veth, "fw0")
    printed = parse_ethtool_stats(in_ns(veth, "ethtool", "-S", "fw0"))
    (after,) = ioctl_read(veth, "fw0")
    assert printed.problems == [] and len(printed.values) > 3
    assert list(before) == list(printed.values) == list(after)  # the same names, in the same order
    for name, value in printed.values.items():
        assert before[name] <= value <= after[name], name  # the same values, give or take movement
    assert before["peer_ifindex"] > 0  # not all zeros: the veth's peer


@needs_netns
def test_an_interface_without_statistics_or_without_existence_is_a_clear_error(veth):
    assert ioctl_read(veth, "lo", "nosuch0", "fw1")[:2] == [
        "lo: its driver gives no ethtool statistics",
        "nosuch0: no such network interface",
    ]


class ShortDriver:
    """A fake ioctl (no real driver here answers short): names a, b, c, a; values for three only."""

    def __init__(self) -> None:
        self.ifreq = type("IfReq", (), {})()
        self.buffer = None

    def get_stringset_length(self, set_id: int) -> int:
        return 4

    def get_stringset(self, set_id: int) -> list[str]:
        return ["a", "b ", "c", "a"]

    def ioctl(self) -> None:
        import ctypes

        from pyroute2.ethtool.ioctl import generate_EthtoolGStats

        from fabricwatch.ingest.nic.ethtool_ioctl import SLACK

        layout = ctypes.POINTER(generate_EthtoolGStats(4 + SLACK))
        gstats = ctypes.cast(self.ifreq.gstats, layout).contents
        gstats.size = 3
        gstats.data[:3] = [10, 11, 12]


def test_fewer_values_than_names_are_reported_and_only_the_given_ones_taken():
    from fabricwatch.ingest.nic.ethtool_ioctl import EthtoolIoctl, _Device

    reader = EthtoolIoctl()
    reader._devices["x0"] = _Device(ShortDriver())
    stats = reader.read("x0")
    assert stats.values == {"a": 10, "b": 11, "c": 12}
    assert stats.problems == ["the driver gave 3 values for 4 names"]
