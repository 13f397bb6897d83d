"""Congestion as a NIC sees it (``detectors/nic_congestion.py``): which counters make which
symptom, per port, on the counter tables NICs report."""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.nic_congestion import NicCongestion
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.schemas.messages import CounterSpec

NS = 1_000_000_000


def said(names: list[str], rows: list[list[float]]) -> set[tuple[str, str]]:
    """(kind, port) of the active symptoms of one poll of a fresh detector."""
    layout = Layout.of(tuple(CounterSpec(n) for n in names))
    ports = [str(p + 1) for p in range(len(rows))]
    frame = RateFrame("h0/mlx5_0", "nic", NS, 1.0, ports, layout, np.array(rows, dtype=float))
    return {
        (s.kind, s.port)
        for s in NicCongestion().update(Poll(frame, np.full(len(rows), 5e10), FabricMap(None)))
        if s.active
    }


def test_a_receiver_needs_marks_in_and_cnps_out_where_it_counts_both():
    names = ["rx_ecn_marked_packets", "cnp_sent", "cnp_received"]
    rows = [[500, 20, 0], [500, 0, 0], [0, 0, 30], [np.nan, 20, 0]]
    assert said(names, rows) == {("ecn_received", "1"), ("cnp_received", "3")}


def test_a_nic_that_counts_one_of_a_signal_s_counters_is_read_by_that_one():
    assert said(["rx_ecn_marked_packets", "rx_bytes"], [[500, 1e9], [0, 1e9]]) == {("ecn_received", "1")}
    assert said(["cnp_sent"], [[20]]) == {("ecn_received", "1")}


def test_a_nic_without_the_counters_says_nothing():
    assert said(["rx_bytes", "tx_bytes"], [[1e9, 1e9]]) == set()


def polls(detector: NicCongestion, readings: list[tuple[int, list[list[float]]]]) -> list[list[tuple]]:
    """Each poll's symptoms as (kind, port, start s, active), and whether the device was open after
    it; ``readings``: per poll, its ``cnp_received`` per port (the poll ends at ``t`` s, 1 s long)."""
    layout = Layout.of((CounterSpec("cnp_received"),))
    out = []
    for t, rows in readings:
        ports = [str(p + 1) for p in range(len(rows))]
        frame = RateFrame("h0/mlx5_0", "nic", t * NS, 1.0, ports, layout, np.array(rows, dtype=float))
        got = detector.update(Poll(frame, np.full(len(rows), 5e10), FabricMap(None)))
        out.append([(s.kind, s.port, s.start_ns / NS, s.active) for s in got] + [detector.open("h0/mlx5_0")])
    return out


def test_a_signal_is_said_every_poll_from_its_poll_s_start_and_cleared_once():
    """Stage 2 expires what is not said again, so a running signal is said every poll with the
    start of the poll it was first seen in; when it stops it is cleared once, then nothing."""
    got = polls(NicCongestion(), [(1, [[0]]), (2, [[5]]), (3, [[7]]), (4, [[0]]), (5, [[0]])])
    assert got == [
        [False],
        [("cnp_received", "1", 1.0, True), True],
        [("cnp_received", "1", 1.0, True), True],
        [("cnp_received", "1", 1.0, False), False],
        [False],
    ]


def test_each_port_runs_on_its_own_and_a_new_port_count_starts_afresh():
    """A NIC whose ports change (one added) is a new device to the detector: what ran on the old
    shape is dropped without a clear, since its ports may not be the same ones."""
    got = polls(NicCongestion(), [(1, [[5], [0]]), (2, [[5], [5]]), (3, [[0], [5]]), (4, [[5]])])
    assert got == [
        [("cnp_received", "1", 0.0, True), True],
        [("cnp_received", "1", 0.0, True), ("cnp_received", "2", 1.0, True), True],
        [("cnp_received", "2", 1.0, True), ("cnp_received", "1", 0.0, False), True],
        [("cnp_received", "1", 3.0, True), True],
    ]
