"""Issue 36, item 2, the NIC side: a NIC whose receive buffer passes its threshold (mlx5's
``rx_buffer_passed_thres_phy``, bnxt's ``rx_buffer_passed_threshold``) poll after poll while its
mean receive rate stays low bursts between two reads: a microburst finding at the NIC. One pass is
nothing, passes at line rate are not sub-poll, and a NIC whose PCIe stalls is host-bound, not a
finding of its own."""

from __future__ import annotations

import numpy as np
from helpers.paths import FIXTURES

from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, CounterSpec, Snapshot, encode
from fabricwatch.schemas.topology import Device, Topology

NS = 1_000_000_000
T0 = 1_767_225_600 * NS
NIC = "h001/mlx5_0"
LINE_BPS = 400e9 / 8
SPECS = [
    CounterSpec("rx_bytes", "counter", 64),
    CounterSpec("tx_bytes", "counter", 64),
    CounterSpec("rx_buffer_passed_thres", "counter", 64),
    CounterSpec("pcie_stall_read_seconds", "counter", 64),
]


def replay(utilisation: np.ndarray, passes: np.ndarray, stalled: np.ndarray | None = None) -> list[Anomaly]:
    """One NIC polled every second: its receive rate as a share of line rate, the buffer passes
    and the stalled PCIe seconds counted in each poll."""
    stalled = np.zeros(len(passes)) if stalled is None else stalled
    pipeline = Pipeline()
    topo = Topology(ts_ns=T0, devices=[Device(NIC, "nic")], links=[])
    out = pipeline.feed(topics.TOPOLOGY, T0, encode(topo))
    totals = np.cumsum(
        np.column_stack([utilisation * LINE_BPS, utilisation * LINE_BPS / 4, passes, stalled]), axis=0
    )
    for t, row in enumerate(totals, start=1):
        snap = Snapshot(NIC, "nic", T0 + t * NS, SPECS, ["1"], [[int(v) for v in row]])
        out += pipeline.feed(topics.COUNTERS, T0 + t * NS, encode(snap))
    return out + pipeline.finish()


def every(n: int, polls: int, events: int = 7) -> np.ndarray:
    passes = np.zeros(polls)
    passes[n - 1 :: n] = events
    return passes


def test_a_nic_whose_buffer_fills_poll_after_poll_at_a_low_rate_is_one_finding_that_ends():
    polls = 400
    passes = np.where(np.arange(polls) < 240, every(3, polls), 0)  # a burst every 3 s for 4 minutes
    found = replay(np.full(polls, 0.3), passes)
    (firing,) = [a for a in found if a.status == "firing"]
    assert (firing.kind, firing.severity, firing.root.device) == ("microbursts", "info", NIC)
    assert "receive buffer passed its threshold" in firing.summary and "30% of line rate" in firing.summary
    assert (firing.start_ns - T0) / NS <= 10, "from the window's first burst"
    (resolved,) = [a for a in found if a.status == "resolved"]
    assert resolved.fingerprint == firing.fingerprint
    assert 240 <= (resolved.end_ns - T0) / NS <= 240 + 60 + 30, "once the window's share halves"


def test_one_pass_passes_at_line_rate_and_a_host_bound_nic_are_no_finding():
    polls = 300
    one = np.zeros(polls)
    one[100] = 50
    assert replay(np.full(polls, 0.3), one) == []
    assert replay(np.full(polls, 0.9), every(2, polls)) == [], "not sub-poll: the poll's mean is high"
    stalled = np.ones(polls)  # its PCIe stalls every second: the host cannot keep up at all
    found = {a.kind for a in replay(np.full(polls, 0.3), every(2, polls), stalled)}
    assert found == {"nic_host_bound"}


def test_real_mlx5_and_bnxt_readings_give_the_counter_the_detector_reads():
    """A ConnectX ``ethtool -S`` and a bnxt_en one (``tests/fixtures/SOURCES.md``)."""
    for source, fixture, raw_name in (
        ("mlx5_ethtool", "ethtool_mlx5_crc_errors_zh_ethtool_notes.txt", "rx_buffer_passed_thres_phy"),
        ("bnxt_ethtool", "ethtool_bnxt_en_rhel8_k4.18_go_ethtool_metrics.txt", "rx_buffer_passed_threshold"),
    ):
        real = parse_ethtool_stats((FIXTURES / fixture).read_text()).values
        specs, values = map_counters(source, real)
        at = [s.name for s in specs].index("rx_buffer_passed_thres")
        assert values[at] == real[raw_name], source
