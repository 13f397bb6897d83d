"""Issue 36, item 1: a link or an uplink group that runs hot between the incidents is a capacity
finding (info while it averages above the band, warning once its peaks leave no room for bursts);
a link in the band with short peaks, and a link nothing is known of, are not."""

from __future__ import annotations

import numpy as np
from helpers.recorders import as_stage1_runs

from fabricwatch.detectors.capacity import Capacity, CapacityConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.schemas.messages import CounterSpec, Symptom
from fabricwatch.schemas.topology import Device, EcmpGroup, Link, Topology

NS = 1_000_000_000
T0 = 1_767_225_600 * NS
LINE = 5e10  # 400 Gb/s in bytes a second
PORTS = ["Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24", "Ethernet32", "Ethernet40"]
"""A leaf: three host ports (hot; in the band with peaks of 97 %; at 30 % with spells at line
rate, an incast's receiver), one port nothing is read of, and two uplinks to the spines that make
its ECMP group."""
SPECS = (CounterSpec("tx_bytes", "counter", 64), CounterSpec("rx_bytes", "counter", 64))


def fabric() -> FabricMap:
    topo = Topology(
        ts_ns=T0,
        devices=[Device("leaf00", "leaf"), Device("spine00", "spine"), Device("spine01", "spine")],
        links=[
            Link("leaf00", "Ethernet32", "spine00", "Ethernet0", 400.0),
            Link("leaf00", "Ethernet40", "spine01", "Ethernet0", 400.0),
        ],
        ecmp_groups=[EcmpGroup("leaf00/uplinks", "leaf00", ["Ethernet32", "Ethernet40"])],
    )
    return FabricMap(topo)


def run(minutes: float, util_at, start_s: float = 0.0, detector: Capacity | None = None):
    """Polls every second for ``minutes``; ``util_at(t, poll)`` gives each port's tx utilisation."""
    detector = detector or Capacity(CapacityConfig())
    fab, said = fabric(), []
    for n in range(int(minutes * 60)):
        t = start_s + n
        tx = np.array(util_at(t, n), dtype=float) * LINE
        values = np.stack([tx, tx * 0.1], axis=1)
        frame = RateFrame("leaf00", "switch", T0 + int(t * NS), 1.0, PORTS, Layout.of(SPECS), values)
        said += as_stage1_runs(detector, Poll(frame, np.full(len(PORTS), LINE), fab))
    return detector, said


def steady(hot_link: float = 0.85, uplinks: float = 0.5):
    def util(t: float, n: int) -> list[float]:
        peak = 0.97 if n % 50 == 0 else 0.65  # 2 % of polls at 97 %: the p99 reaches 95 %
        spells = 1.0 if n % 60 < 10 else 0.2  # 10 s of every minute at line rate, 33 % on average
        return [hot_link, peak, spells, np.nan, uplinks, uplinks]

    return util


def latest(said: list[Symptom]) -> dict[tuple[str, str], Symptom]:
    out: dict[tuple[str, str], Symptom] = {}
    for s in said:
        out[(s.port, s.group)] = s
    return out


def test_a_hot_link_and_one_with_no_room_for_bursts_are_found_spells_and_the_unknown_are_not():
    _, said = run(7, steady())
    found = latest(said)
    assert set(found) == {("Ethernet0", ""), ("Ethernet8", "")}
    hot, peaks = found[("Ethernet0", "")], found[("Ethernet8", "")]
    assert hot.active and hot.evidence["mean_util"] == 0.85 and hot.evidence["no_room"] == 0
    assert peaks.active and peaks.evidence["no_room"] == 1
    assert peaks.evidence["at_peak"] >= 0.01 and 0.6 < peaks.evidence["mean_util"] < 0.8
    first = min(s.ts_ns for s in said)
    assert (first - T0) / NS <= 300 + 60 + 1, "within the window, a bucket and a poll"


def test_an_uplink_group_running_hot_is_one_finding_for_the_group():
    _, said = run(7, steady(hot_link=0.5, uplinks=0.9))
    groups = {s.group for s in said if s.group}
    assert groups == {"leaf00/uplinks"}
    (group,) = [s for s in said if s.group][-1:]
    assert group.port == "" and group.evidence["mean_util"] == 0.9


def test_a_link_back_in_the_band_clears_once_its_window_says_so():
    detector, said = run(7, steady())
    assert latest(said)[("Ethernet0", "")].active
    _, after = run(7, steady(hot_link=0.6), start_s=7 * 60, detector=detector)
    assert latest(after)[("Ethernet0", "")].active is False


def test_a_window_with_too_few_polls_starts_and_ends_nothing():
    """A switch read for 2 of every 5 minutes (its collector restarting): under half the window is
    unknown, not hot and not healthy."""

    def gappy(t: float, n: int) -> list[float]:
        return [0.85 if (t // 60) % 5 < 2 else np.nan] * 3 + [np.nan, 0.5, 0.5]

    _, said = run(20, gappy)
    assert said == []
