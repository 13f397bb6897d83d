"""Links that go down (issue 34, 3): a dead link is one incident until it is back, a flapping link
one incident with its flap count, a flap between two polls is still seen; resets and wraps stay
quiet, and a link taken down on purpose is said as a finding, never paged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from helpers import small_fabric

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incidents import Correlator
from fabricwatch.detectors.link_state import LinkState, LinkStateConfig
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.schemas.messages import Anomaly, CounterSpec, Device, Link, Symptom, Topology

NIC3, NIC10 = "h003/mlx5_0", "h010/mlx5_0"
NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str, collector: str = "") -> list[Anomaly]:
    events = small_fabric.replayed(tmp_path, "link_down", faults, 5, 150, collector)
    return [a for a in events if a.kind == "link_down"]


def lifecycle(events: list[Anomaly]) -> list[Anomaly]:
    return [a for a in events if a.status != "updated"]


def test_a_dead_host_link_is_one_incident_from_the_next_poll_until_it_is_back(tmp_path):
    events = replayed(tmp_path, "  - {kind: link_down, device: h003, start: 20.3, duration: 30}")
    assert [(a.status, a.root.device) for a in lifecycle(events)] == [("firing", NIC3), ("resolved", NIC3)]
    firing, resolved = lifecycle(events)
    assert [a.evidence["state"] for a in events if a.status == "updated"] == ["up"]  # back: news
    assert (firing.ts_ns - T0) / NS - 20.3 <= 1.0  # the first poll after it went down
    assert firing.severity == "critical" and firing.jobs == ["dp"]
    assert "link h003/mlx5_0 1 <-> leaf00" in firing.summary and "is down" in firing.summary
    assert (resolved.ts_ns - T0) / NS >= 50.3 + 30  # back, then stable for stable_after_s


def test_a_link_that_flaps_four_times_is_one_incident_with_its_flap_count(tmp_path):
    faults = (
        "  - {kind: link_down, device: leaf01, port: Ethernet72, flaps: 4, up_s: 4,"
        " start: 40.6, duration: 30}"
    )
    events = replayed(tmp_path, faults)
    assert [a.status for a in lifecycle(events)] == ["firing", "resolved"]
    resolved = events[-1]
    # Every change is news to a receiver: down, up, down again (2), ... up after the fourth.
    said = [(a.evidence["state"], a.evidence["flaps"]) for a in events if a.status != "resolved"]
    assert said == [(state, n) for n in range(1, 5) for state in ("down", "up")]
    assert resolved.root.device == "leaf01" and resolved.root.port == "Ethernet72"
    assert resolved.evidence["flaps"] == 4 and "flaps: down 4 times" in resolved.summary


def test_a_flap_between_two_polls_is_seen_by_its_counters(tmp_path):
    events = replayed(tmp_path, "  - {kind: link_down, device: h010, start: 60.45, duration: 0.4}")
    assert [(a.status, a.root.device) for a in lifecycle(events)] == [("firing", NIC10), ("resolved", NIC10)]
    assert "went down and came back" in events[-1].summary


def test_resets_and_wrapping_counters_are_not_flaps(tmp_path):
    collector = (
        ", counter_start: near_wrap, resets: [{device: h002/mlx5_0, at: 40.5}, {device: leaf00, at: 70.5}]"
    )
    assert replayed(tmp_path, "", collector=collector) == []


def _frame(ts_s: int, **columns: float) -> RateFrame:
    """One port's poll with the given columns (counters as rates per second, gauges as read)."""
    specs = tuple(CounterSpec(k, "gauge" if k.endswith("_down") else "counter", 64) for k in columns)
    values = np.array([list(columns.values())], dtype=float)
    return RateFrame("leaf00", "switch", T0 + ts_s * NS, 1.0, ["Ethernet0"], Layout.of(specs), values)


def _detector(cabled: bool = False) -> tuple[LinkState, Callable[..., list]]:
    detector = LinkState(LinkStateConfig(stable_after_s=5.0, lack_of_data_s=20.0))
    links = [Link("leaf00", "Ethernet0", "spine00", "Ethernet0", 400.0)] if cabled else []
    devices = [Device("leaf00", "leaf"), Device("spine00", "spine")]
    fabric = FabricMap(Topology(T0, devices, links))

    def poll(ts: int, **columns: float) -> list:
        return detector.update(Poll(_frame(ts, **columns), np.full(1, 5e10), fabric))

    return detector, poll


def test_a_port_taken_down_on_purpose_says_so_and_unknown_is_not_stable():
    _, poll = _detector(cabled=True)

    def gauges(ts: int, down: float, changes: float, admin: float = 0.0) -> list:
        return poll(ts, carrier_changes=changes, oper_down=down, admin_down=admin)

    assert gauges(1, 0.0, 0.0) == []
    (planned,) = gauges(2, 1.0, 1.0, admin=1.0)  # disabled by its operator: said as such, no flap
    assert planned.evidence == {"state": "down", "flaps": 0, "on_purpose": 1}
    assert [s.evidence for s in gauges(3, 1.0, 0.0)] == [{"state": "down", "flaps": 0}]  # enabled, still down
    assert [s.evidence["state"] for s in gauges(4, 0.0, 1.0)] == ["up"]
    for ts in range(5, 13):  # readings unknown: neither stable nor over
        assert [s.active for s in gauges(ts, np.nan, np.nan)] == [True], ts
    said = [s for ts in range(13, 19) for s in gauges(ts, 0.0, 0.0)]
    assert [s.active for s in said][-1] is False and sum(not s.active for s in said) == 1


def test_a_link_taken_down_on_purpose_is_one_finding_and_its_drops_are_its_own(tmp_path):
    """A leaf port shut by its operator: the host's end reads only that its link went down, the
    leaf's end says it was on purpose. One incident for the link, said as a finding (``info``, not
    paged), naming where it was taken down; what the leaf drops toward it is caused by it."""
    fault = (
        "  - {kind: link_down, device: leaf00, port: Ethernet24, planned: true, start: 30.3, duration: 20}"
    )
    events = small_fabric.replayed(tmp_path, "link_down", fault, 5, 90)
    said = [a for a in events if a.kind == "link_down"]
    assert [a.status for a in lifecycle(said)] == ["firing", "resolved"]
    assert all(a.finding and a.severity == "info" for a in said)
    assert "taken down on purpose (admin down at leaf00 Ethernet24)" in said[0].summary
    assert "enable leaf00 Ethernet24 again" in said[0].hint
    drops = [a for a in events if a.kind == "packet_loss"]
    assert drops and {a.caused_by for a in drops} == {said[0].fingerprint}


def test_a_far_end_read_first_fires_then_is_a_finding_within_the_poll():
    """The two ends are read at different times: the host's end may be read first, and its
    incident fires as a page. The leaf's end, read within the poll, says it was on purpose: an
    ``updated`` event makes it a finding before any receiver is told (the alerter moves it,
    ``test_alerts.py``)."""
    links = [Link("leaf00", "Ethernet0", NIC3, "1", 400.0)]
    fabric = FabricMap(Topology(T0, [Device("leaf00", "leaf"), Device(NIC3, "nic", host="h003")], links))
    corr = Correlator(fabric=fabric)
    ts = T0 + 10 * NS
    host_end = Symptom("link_down", NIC3, ts, ts - NS, True, "1", evidence={"state": "down", "flaps": 1})
    corr.on_symptom(host_end)
    (first,) = corr.tick(ts)
    assert (first.status, first.severity, first.finding) == ("firing", "critical", False)
    planned = {"state": "down", "flaps": 0, "on_purpose": 1}
    corr.on_symptom(
        Symptom("link_down", "leaf00", ts + NS // 2, ts - NS, True, "Ethernet0", evidence=planned)
    )
    (then,) = corr.tick(ts + NS // 2)
    assert (then.status, then.severity, then.finding, then.fingerprint) == (
        "updated",
        "info",
        True,
        first.fingerprint,
    )
    assert "taken down on purpose (admin down at leaf00 Ethernet0)" in then.summary


def test_a_port_down_since_it_was_first_read_and_cabled_to_nothing_known_is_not_a_fault():
    """An uncabled port is down and enabled by default on many switches: without a topology peer,
    a port never seen up says nothing until it changes."""
    _, poll = _detector()
    assert [poll(ts, oper_down=1.0, carrier_changes=0.0) for ts in range(1, 5)] == [[], [], [], []]
    _, poll = _detector(cabled=True)  # the topology cables it: a dead link
    assert [s.evidence["state"] for s in poll(1, oper_down=1.0, carrier_changes=0.0)] == ["down"]


def test_counters_alone_keep_a_dead_link_down_until_traffic_says_it_is_up():
    """mlx5's ``link_down_events_phy`` counts downs, never ups: without a state gauge, a link that
    carries nothing is not known to be up, so it does not heal by itself (found in review: it
    cleared after 31 s while still down)."""
    _, poll = _detector()
    assert poll(1, link_downed=0.0, rx_packets=1e6) == []
    assert [s.evidence["flaps"] for s in poll(2, link_downed=1.0, rx_packets=0.0)] == [1]
    for ts in range(3, 40):
        assert [s.active for s in poll(ts, link_downed=0.0, rx_packets=0.0)] == [True], ts
    said = [s for ts in range(40, 47) for s in poll(ts, link_downed=0.0, rx_packets=1e6)]
    assert [s.active for s in said][-1] is False  # carrying traffic again, for stable_after_s


def test_carrier_changes_count_the_link_coming_back_as_an_up_not_a_second_down():
    """Found in review: one outage read from carrier_changes alone was "down 2 times"."""
    _, poll = _detector()
    assert poll(1, carrier_changes=0.0) == []
    assert [(s.evidence["state"], s.evidence["flaps"]) for s in poll(2, carrier_changes=1.0)] == [("down", 1)]
    assert [(s.evidence["state"], s.evidence["flaps"]) for s in poll(9, carrier_changes=1.0)] == [("up", 1)]


def test_a_down_uplink_says_its_ecmp_group_runs_on_the_members_left(tmp_path):
    """Issue 34: a member that is down is not an ECMP collapse; its link incident says what the
    group runs on while it is down, and no collapse opens."""
    faults = "  - {kind: link_down, device: leaf00, port: Ethernet72, start: 30.3, duration: 30}"
    events = small_fabric.replayed(tmp_path, "uplink", faults, 11, 90)
    (firing,) = [a for a in events if a.kind == "link_down" and a.status == "firing"]
    assert "leaf00/uplinks runs on 3 of 4 members" in firing.summary
    assert firing.evidence["ecmp_groups"] == "leaf00/uplinks runs on 3 of 4 members"
    assert not [a for a in events if a.kind == "ecmp_collapse"]
