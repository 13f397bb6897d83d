"""Fail-slow links (issue 34, 6): a link that came up below the speed the topology gives it is
one warning per link with its shortfall; a port the topology does not cable, a down port and a
single low reading (a renegotiation) are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import small_fabric

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.link_speed import LinkSpeed, LinkSpeedConfig
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.schemas.messages import Anomaly, CounterSpec
from fabricwatch.schemas.topology import Device, Link, Topology

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str) -> list[Anomaly]:
    events = small_fabric.replayed(tmp_path, "slow_link", faults, 7, 200)
    return [a for a in events if a.kind == "slow_link"]


def test_a_host_link_at_half_speed_is_one_warning_at_its_nic_with_its_shortfall(tmp_path):
    events = replayed(
        tmp_path, "  - {kind: speed_downshift, device: h003, factor: 0.5, start: 30.3, duration: 60}"
    )
    assert {(a.root.device, a.root.port) for a in events} == {("h003/mlx5_0", "1")}
    firing, resolved = events[0], events[-1]
    cfg = DetectorConfig().link_speed
    assert firing.status == "firing" and resolved.status == "resolved"
    assert (firing.ts_ns - T0) / NS - 30.3 <= (cfg.persist_polls + 1) * cfg.every_s + 2
    assert firing.severity == "warning"
    assert firing.evidence["speed_gbps"] == 200 and firing.evidence["expected_gbps"] == 400
    assert "runs at 200 Gb/s, below the 400 Gb/s it should (50% of it)" in firing.summary
    assert "h003/mlx5_0 1 and leaf00" in firing.summary and firing.jobs == ["dp"]
    assert firing.hint.startswith("Check the link h003/mlx5_0 1 to leaf00")


def test_an_uplink_at_half_speed_is_one_incident_for_both_its_ends(tmp_path):
    events = replayed(
        tmp_path,
        "  - {kind: speed_downshift, device: leaf01, port: Ethernet64, factor: 0.5, start: 30.3,"
        " duration: 60}",
    )
    (firing,) = [a for a in events if a.status == "firing"]
    assert {"leaf01"} <= set(firing.devices) and any(d.startswith("spine") for d in firing.devices)


def _frame(ts_ns: int, speeds: list[float], down: list[float]) -> RateFrame:
    specs = (CounterSpec("link_speed_mbps", "gauge", 64), CounterSpec("oper_down", "gauge", 64))
    values = np.array([speeds, down], dtype=float).T
    ports = ["Ethernet0", "Ethernet8", "Ethernet16"]
    return RateFrame("leaf00", "switch", ts_ns, 1.0, ports, Layout.of(specs), values)


def test_uncabled_ports_down_ports_and_one_low_reading_are_not_slow_links():
    """Ethernet0 and Ethernet8 are cabled at 400G, Ethernet16 is not in the topology. Ethernet0
    reads 200G once (a renegotiation) then 400G; Ethernet8 is down (no speed to judge); Ethernet16
    runs at 100G, which nothing says is wrong."""
    topo = Topology(
        ts_ns=T0,
        devices=[Device("leaf00", "leaf"), Device("spine00", "spine"), Device("spine01", "spine")],
        links=[
            Link("leaf00", "Ethernet0", "spine00", "Ethernet0", 400.0),
            Link("leaf00", "Ethernet8", "spine01", "Ethernet0", 400.0),
        ],
    )
    detector, fabric = LinkSpeed(LinkSpeedConfig(every_s=1.0)), FabricMap(topo)
    said = []
    for t, first in enumerate([200_000, 400_000, 400_000, 400_000]):
        frame = _frame(T0 + t * NS, [first, 200_000, 100_000], [0, 1, 0])
        said += detector.update(Poll(frame, np.full(3, 5e10), fabric))
    assert said == []
    low = [_frame(T0 + (10 + t) * NS, [200_000, 400_000, 100_000], [0, 0, 0]) for t in range(2)]
    said = [s for f in low for s in detector.update(Poll(f, np.full(3, 5e10), fabric))]
    assert [(s.port, s.evidence["shortfall_gbps"]) for s in said] == [("Ethernet0", 200.0)]
