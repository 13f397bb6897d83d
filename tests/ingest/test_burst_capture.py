"""Issue 36, item 3: burst capture at 1 ms against a veth pair in a network namespace the test
makes and removes. A sender process puts bursts of raw Ethernet frames on the wire at times it
records; the capture of the interface's counters must put each burst's bytes in the milliseconds
it was sent, and count every byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from fabricwatch.ingest.nic.burst import RDMA_COUNTERS as RDMA
from fabricwatch.ingest.nic.burst import CaptureError, capture, profile

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="needs root and iproute2 (.ci/run installs it) to make a namespace",
    ),
]
BURSTS, FRAMES, FRAME, GAP_S = 8, 120, 1500, 0.05
"""Bursts of 120 frames of 1,500 bytes, one every 50 ms."""
SEND = """
import json, socket, sys, time
frames, frame, bursts, gap_s, at_ns = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                        float(sys.argv[4]), int(sys.argv[5]))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("fw0", 0))
payload = b"\\xff" * 6 + b"\\x02" + b"\\x00" * 5 + b"\\x88\\xb5" + b"\\x00" * (frame - 14)
log = []
for b in range(bursts):
    due = at_ns + round(b * gap_s * 1e9)
    while time.perf_counter_ns() < due:
        time.sleep(0.0002)
    first = time.perf_counter_ns()
    sent = sum(s.send(payload) for _ in range(frames))
    log.append([first, time.perf_counter_ns(), sent])
print(json.dumps(log))
"""
CAPTURE = """
import json, sys
from fabricwatch.ingest.nic.burst import capture
cap = capture("fw0", float(sys.argv[1]), float(sys.argv[2]))
print(json.dumps([cap.origin_ns, cap.t_ns.tolist(), cap.values.tolist()]))
"""


def in_ns(ns: str, *cmd: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=subprocess.PIPE, text=True, **kw)


@pytest.fixture
def veth() -> Iterator[str]:
    """A namespace holding the veth pair fw0/fw1, up; removed afterwards whatever happened."""
    ns = f"fwburst-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        # No IPv6 on the pair: its neighbour discovery would put frames of its own on the wire.
        for cmd in (
            ("sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"),
            ("ip", "link", "add", "fw0", "type", "veth", "peer", "name", "fw1"),
            ("ip", "link", "set", "fw0", "up"),
            ("ip", "link", "set", "fw1", "up"),
        ):
            subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_a_1ms_capture_puts_each_burst_in_the_milliseconds_it_was_sent_and_counts_every_byte(veth):
    from fabricwatch.ingest.nic.burst import Capture

    at_ns = time.perf_counter_ns() + 700_000_000  # the capture runs from before the first burst
    capturing = in_ns(veth, sys.executable, "-c", CAPTURE, "0.001", str(0.7 + BURSTS * GAP_S + 0.3))
    sending = in_ns(
        veth, sys.executable, "-c", SEND, str(FRAMES), str(FRAME), str(BURSTS), str(GAP_S), str(at_ns)
    )
    log = json.loads(sending.communicate(timeout=30)[0])
    origin, t_ns, values = json.loads(capturing.communicate(timeout=30)[0])
    cap = Capture("fw0", time.time_ns(), origin, np.array(t_ns), np.array(values, dtype=np.uint64))
    prof = profile(cap, line_Bps=10e9 / 8, period_s=0.001)

    assert prof.achieved_period_s == pytest.approx(0.001, rel=0.05)
    per_bin = np.array(prof.tx.per_bin_Bps) * prof.bin_s
    sent = sum(b for _, _, b in log)
    assert sent == BURSTS * FRAMES * FRAME
    assert per_bin.sum() == pytest.approx(sent, abs=1), "every byte sent, and nothing else"
    assert prof.tx_packets == BURSTS * FRAMES
    near = np.zeros(len(per_bin), dtype=bool)
    for first, last, size in log:
        lo, hi = ((first - origin) / 1e6 - 2, (last - origin) / 1e6 + 2)  # ms, ±2 bins
        window = slice(max(0, int(lo)), int(np.ceil(hi)) + 1)
        near[window] = True
        assert per_bin[window].sum() >= 0.95 * size, "the burst's bytes in its own milliseconds"
        # A loaded machine may hold the sender back mid-burst (CI once read a 180 KB burst as 53 KB
        # in each of three bins): the peak is judged against how long the send itself took.
        sent_ms = max(1.0, (last - first) / 1e6)
        assert per_bin[window].max() >= 0.3 * size / sent_ms, "its peak in the ms it was sent, not smeared"
    assert per_bin[~near].sum() <= 0.01 * FRAMES * FRAME, "nothing between the bursts"


def test_an_interface_that_is_not_there_or_a_period_out_of_range_is_a_clear_error(tmp_path):
    with pytest.raises(CaptureError, match=r"nosuch0: cannot read .*nosuch0/statistics"):
        capture("nosuch0", 0.001, 1.0, sys_class_net=tmp_path)
    with pytest.raises(CaptureError, match="must be 50 µs to 1 s"):
        capture("lo", 10e-6, 1.0)
    with pytest.raises(CaptureError, match="at most 60"):
        capture("lo", 0.001, 600.0)


def test_the_command_prints_one_profile_per_interface_and_fails_for_one_it_cannot_read(capsys):
    from fabricwatch.cli.main import main

    assert main(["collect", "burst", "lo", "nosuch0", "--seconds", "0.2", "--line-gbps", "100"]) == 1
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    prof = json.loads(line)
    assert prof["type"] == "burst_profile" and prof["netdev"] == "lo" and prof["line_Bps"] == 100e9 / 8
    assert len(prof["tx"]["per_bin_Bps"]) == 200 and prof["samples"] == 201
    assert err.strip() == (
        "fabricwatch collect burst: nosuch0: cannot read /sys/class/net/nosuch0/statistics: "
        "No such file or directory"
    )


def test_an_rdma_nic_s_ecn_marks_and_cnps_are_captured_beside_its_bytes(tmp_path):
    """Where the interface is an RDMA NIC's, its port's ``hw_counters`` (mlx5: ECN-marked RoCE
    packets received, CNPs sent) are sampled too, with the same pread: a sysfs tree of that shape
    whose counters a writer thread moves while the capture runs (a real NIC's files are the
    kernel's; this machine has none). An interface without one (loopback) says unknown."""
    import threading

    net = tmp_path / "net"
    stats = net / "fake0" / "statistics"
    hw = net / "fake0" / "device" / "infiniband" / "mlx5_0" / "ports" / "1" / "hw_counters"
    for folder, names in ((stats, ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")), (hw, RDMA)):
        folder.mkdir(parents=True)
        for name in names:
            (folder / name).write_text(f"{0:020d}\n")
    (hw / "lifespan").write_text("10\n")  # the kernel's cache of hw_counters, in ms (its default)
    marks = [(0.05, 300), (0.15, 500)]  # (when, how many), as a burst's marks arrive

    def writer(start: float) -> None:
        fd = os.open(hw / "np_ecn_marked_roce_packets", os.O_WRONLY)
        total = 0
        for at, count in marks:
            time.sleep(max(0.0, start + at - time.monotonic()))
            total += count
            os.pwrite(fd, f"{total:020d}\n".encode(), 0)
        os.close(fd)
        fd = os.open(hw / "np_cnp_sent", os.O_WRONLY)  # in place, as the kernel's: never empty
        os.pwrite(fd, f"{40:020d}\n".encode(), 0)
        os.close(fd)

    moving = threading.Thread(target=writer, args=(time.monotonic(),))
    moving.start()
    cap = capture("fake0", 0.001, 0.3, sys_class_net=net)
    moving.join()
    prof = profile(cap, 100e9 / 8, 0.001)
    assert (prof.ecn_marked_packets, prof.cnp_sent, prof.ecn_refresh_s) == (800, 40, 0.01)
    marked = np.array(prof.ecn_per_bin_pps) * prof.bin_s
    assert marked.sum() == pytest.approx(800, abs=1)
    for at, count in marks:
        near = marked[max(0, int(at * 1e3) - 5) : int(at * 1e3) + 10]
        assert near.sum() >= 0.95 * count, "the marks in the milliseconds they came"
    plain = profile(capture("lo", 0.001, 0.05), 100e9 / 8, 0.001)
    assert (plain.ecn_marked_packets, plain.cnp_sent, plain.ecn_per_bin_pps, plain.ecn_refresh_s) == (
        None,
        None,
        [],
        None,
    )


def test_a_sample_whose_counter_cannot_be_read_costs_only_itself(tmp_path):
    """A counter file caught empty or unparsable (a device going away, a file read mid-write) drops
    the samples read then, counted in ``unread``; the capture goes on and the profile interpolates
    across the gap, its byte total intact. Before, the first such read ended the capture with a
    ValueError and lost every sample taken."""
    import threading

    stats = tmp_path / "net" / "fake0" / "statistics"
    stats.mkdir(parents=True)
    for name in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"):
        (stats / name).write_text(f"{0:020d}\n")

    def writer(start: float) -> None:
        fd = os.open(stats / "rx_bytes", os.O_WRONLY)
        steps = [(0.05, b"not a number\n"), (0.10, f"{125_000:020d}\n".encode())]
        for at, text in steps:
            time.sleep(max(0.0, start + at - time.monotonic()))
            os.pwrite(fd, text.ljust(21), 0)
        os.close(fd)

    moving = threading.Thread(target=writer, args=(time.monotonic(),))
    moving.start()
    cap = capture("fake0", 0.001, 0.2, sys_class_net=tmp_path / "net")
    moving.join()
    prof = profile(cap, 100e9 / 8, 0.001)
    assert 10 <= prof.unread <= 120, "the samples read while the file held no number"
    assert prof.samples + prof.unread <= 202 and prof.samples >= 50
    moved = np.array(prof.rx.per_bin_Bps) * prof.bin_s
    assert moved.sum() == pytest.approx(125_000, rel=1e-6), "the bytes across the gap, none lost"
