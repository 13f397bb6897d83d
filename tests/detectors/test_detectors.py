"""Stage-1 detectors against the reference behaviour in docs/detectors.md, on hand-built counter sequences.

Each test drives raw cumulative counters through the real rate engine, as a collector would.
"""

from __future__ import annotations

import math

import msgspec
from helpers.switch_polls import (
    COLS,
    PORTS,
    T0,
    LINE_Bps,
    Switch,
    ecmp_topology,
    incast,
    run,
    storm,
)

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incidents import Correlator
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.schemas.messages import (
    CounterSpec,
    Device,
    Link,
    NicAttachment,
    Snapshot,
    Symptom,
    Topology,
)


def test_storm_detected_after_detection_time_at_100ms_polls_and_restored():
    sw, stage = Switch("leaf0", ["Ethernet0", "Ethernet8"]), Stage1()
    out = run(stage, [sw.poll(0.1)] + [sw.poll(0.1, **storm("Ethernet0")) for _ in range(3)])
    assert [len(s) for s in out] == [0, 0, 1, 1]  # 200 ms of storm = two 100 ms polls
    sym = out[2][0]
    assert (sym.kind, sym.port, sym.priority, sym.active) == ("pfc_storm", "Ethernet0", 3, True)
    assert sym.start_ns == T0 + int(0.1e9)  # the storm began with the first stormed interval
    quiet = run(stage, [sw.poll(0.1), sw.poll(0.1)])
    assert quiet[0] and quiet[0][0].active  # 100 ms quiet: not restored yet
    assert not quiet[1][0].active  # 200 ms without pause frames: restored


def test_paused_port_that_still_transmits_is_not_a_storm():
    """Heavy but working PFC (incast backpressure): paused often, yet data keeps flowing."""
    sw, stage = Switch("leaf0", ["Ethernet0", "Ethernet8"]), Stage1()
    busy = {
        "rx_pfc_frames": {"Ethernet0": 50_000},
        "rx_pfc_duration_us": {"Ethernet0": 6e5},
        "queue_occupancy_bytes": {"Ethernet0": 1e6},
        "queue_tx_bytes": {"Ethernet0": 0.4 * LINE_Bps},
        "tx_bytes": {"Ethernet0": 0.4 * LINE_Bps},
    }
    out = run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **busy) for _ in range(5)])
    assert not any(out)


def test_incast_needs_to_persist_and_a_single_burst_is_absorbed():
    sw, stage = Switch("leaf0", PORTS), Stage1()
    feeders = PORTS[1:5]
    burst = {
        **incast("Ethernet0", feeders),
        "queue_occupancy_bytes": {"Ethernet0": 0},
        "tx_bytes": {"Ethernet0": 0.4 * LINE_Bps},
    }
    out = run(stage, [sw.poll(1.0), sw.poll(1.0, **burst), sw.poll(1.0)])
    assert not any(out), "a peak that drained before the read is a burst the buffer absorbed"
    partial = {**incast("Ethernet0", feeders), "tx_bytes": {"Ethernet0": 0.6 * LINE_Bps}}
    out = run(stage, [sw.poll(1.0, **partial), sw.poll(1.0, **incast("Ethernet0", feeders))])
    assert out[0] == [] and out[1][0].kind == "incast" and out[1][0].port == "Ethernet0"
    assert out[1][0].evidence["fan_in_ports"] == 4


def test_fan_in_counts_the_ports_whose_traffic_rose_toward_the_victim_not_every_busy_port():
    """Found (issue 33, 7a): fan-in was every port of the switch receiving 5 % of line rate, so
    under background load a hot spot fed by one port (a fabric link carrying a collapsed group's
    traffic) passed the minimum fan-in with 4 of 5 "feeders", and one fed by exactly three said 4.
    Now a feeder is a port whose received rate rose since the switch's last quiet poll."""
    background = {
        "rx_bytes": {p: 0.3 * LINE_Bps for p in PORTS},
        "tx_bytes": {p: 0.3 * LINE_Bps for p in PORTS},
    }

    def congested(feeders: list[str], each: float) -> dict:
        rx = {**background["rx_bytes"], **{f: (0.3 + each) * LINE_Bps for f in feeders}}
        return {
            **incast("Ethernet0", feeders),
            "rx_bytes": rx,
            "tx_bytes": {**background["tx_bytes"], "Ethernet0": 0.98 * LINE_Bps},
        }

    sw, stage = Switch("leaf0", PORTS), Stage1()
    quiet = [sw.poll(1.0, **background) for _ in range(3)]
    assert not any(run(stage, quiet + [sw.poll(1.0, **congested(["Ethernet40"], 0.7)) for _ in range(4)]))
    sw, stage = Switch("leaf0", PORTS), Stage1()
    quiet = [sw.poll(1.0, **background) for _ in range(3)]
    out = run(stage, quiet + [sw.poll(1.0, **congested(PORTS[1:4], 0.25)) for _ in range(3)])
    assert out[3] and out[3][0].port == "Ethernet0"
    assert (out[3][0].evidence["fan_in_ports"], out[3][0].evidence["fan_in_by"]) == (3, "rise")


def test_senders_already_busy_that_turn_toward_one_receiver_are_its_fan_in():
    """Traffic that turns toward the victim without rising (senders at full rate to another port
    before) is not explained by any rise: the ports' level counts then, as before."""
    busy = {"rx_bytes": {p: 0.35 * LINE_Bps for p in PORTS[1:5]}, "tx_bytes": {"Ethernet40": 0.98 * LINE_Bps}}
    sw, stage = Switch("leaf0", PORTS), Stage1()
    out = run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **busy) for _ in range(2)])
    out += run(
        stage,
        [sw.poll(1.0, **{**incast("Ethernet0", PORTS[1:5]), "rx_bytes": busy["rx_bytes"]}) for _ in range(2)],
    )
    assert not any(out[:3]) and out[3] and out[3][0].port == "Ethernet0"
    assert (out[3][0].evidence["fan_in_ports"], out[3][0].evidence["fan_in_by"]) == (4, "level")


def test_only_pausing_that_lasts_makes_an_incast_fire_at_once():
    """Found (issue 33, 7): a pause frame sent on any port of the switch, for 1 to 17 us, made a
    queue in its band fire at once as critical. Now only the switch pausing its other ports on the
    queue's priority for 1% of the poll is congestion spreading."""
    feeders = PORTS[1:5]
    partial = {**incast("Ethernet0", feeders), "tx_bytes": {"Ethernet0": 0.6 * LINE_Bps}}
    for pause_us, fires in ((17.0, False), (0.3e6, True)):
        sw, stage = Switch("leaf0", PORTS), Stage1()
        spreading = {
            **partial,
            "tx_pfc_frames": {"Ethernet40": 200},
            "tx_pfc_duration_us": {"Ethernet40": pause_us},
        }
        out = run(stage, [sw.poll(1.0), sw.poll(1.0, **spreading)])
        assert bool(out[1]) == fires, pause_us
    sw, stage = Switch("leaf0", PORTS), Stage1()  # pausing on the victim's own port: not upstream
    itself = {**partial, "tx_pfc_frames": {"Ethernet0": 200}, "tx_pfc_duration_us": {"Ethernet0": 0.3e6}}
    assert run(stage, [sw.poll(1.0), sw.poll(1.0, **itself)])[1] == []


def test_a_whole_poll_of_standing_incast_is_reported_at_once():
    """Line rate all interval, queue deep at its peak and still deep when read: already sustained."""
    sw, stage = Switch("leaf0", PORTS), Stage1()
    out = run(stage, [sw.poll(1.0), sw.poll(1.0, **incast("Ethernet0", PORTS[1:5]))])
    assert out[1] and out[1][0].kind == "incast"


def test_an_incast_clears_on_the_first_poll_that_marks_nothing():
    """A poll without marks or pauses spares the switch's congestion detectors, except where one of
    their streaks is open: the incast's end is said then, not when the queue next marks."""
    sw, stage = Switch("leaf0", PORTS), Stage1()
    out = run(stage, [sw.poll(1.0), sw.poll(1.0, **incast("Ethernet0", PORTS[1:5])), sw.poll(1.0)])
    assert out[1] and out[1][0].active
    assert [(s.kind, s.port, s.active) for s in out[2]] == [("incast", "Ethernet0", False)]
    assert run(stage, [sw.poll(1.0)]) == [[]]


def test_incast_near_the_start_level_does_not_flap_with_noisy_readings():
    """Once begun, an incast holds while its queue peaks past a quarter of the ECN band."""
    sw, stage = Switch("leaf0", PORTS), Stage1()
    levels = [900e3, 700e3, 880e3, 600e3, 750e3]
    out = run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **incast("Ethernet0", PORTS[1:5], w)) for w in levels])
    starts = {s.start_ns for poll in out for s in poll}
    assert out[2] and all(out[2:]) and len(starts) == 1


def test_queue_below_ecn_threshold_is_not_incast():
    sw, stage = Switch("leaf0", PORTS), Stage1()
    out = run(
        stage, [sw.poll(1.0)] + [sw.poll(1.0, **incast("Ethernet0", PORTS[1:5], 80e3)) for _ in range(4)]
    )
    assert not any(out)


def test_ecmp_collapse_under_load_persists_then_fires_and_balanced_load_does_not():
    uplinks = PORTS[2:6]
    sw, stage = Switch("leaf0", PORTS), Stage1()
    stage.set_topology(ecmp_topology(uplinks))
    balanced = {
        "tx_bytes": dict(
            zip(uplinks, [0.8 * LINE_Bps, 0.7 * LINE_Bps, 0.75 * LINE_Bps, 0.9 * LINE_Bps], strict=True)
        )
    }
    collapsed = {
        "tx_bytes": dict(zip(uplinks, [0.97 * LINE_Bps, 0.01 * LINE_Bps, 0.0, 0.02 * LINE_Bps], strict=True))
    }
    quiet_skew = {"tx_bytes": dict(zip(uplinks, [0.05 * LINE_Bps, 0.0, 0.0, 0.0], strict=True))}
    out = run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **balanced) for _ in range(5)])
    out += run(stage, [sw.poll(1.0, **quiet_skew) for _ in range(5)])
    assert not any(out), "balanced heavy load and a skewed but quiet group are not incidents"
    out = run(stage, [sw.poll(1.0, **collapsed) for _ in range(3)])
    assert [len(s) for s in out] == [0, 0, 1]
    assert out[2][0].group == "leaf0/uplinks" and out[2][0].evidence["entropy"] < 0.3


def test_all_traffic_on_one_member_has_entropy_zero_not_minus_zero():
    uplinks = PORTS[2:6]
    sw, stage = Switch("leaf0", PORTS), Stage1()
    stage.set_topology(ecmp_topology(uplinks))
    one = {"tx_bytes": dict(zip(uplinks, [0.97 * LINE_Bps, 0.0, 0.0, 0.0], strict=True))}
    out = run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **one) for _ in range(3)])
    entropy = next(s for polls in out for s in polls).evidence["entropy"]
    assert entropy == 0.0 and math.copysign(1.0, entropy) == 1.0  # printed "0.0000", not "-0.0000"


def nic_leaf_spine() -> Topology:
    """h1's NIC on leaf0 Ethernet0; leaf0's uplink Ethernet32 to spine0 Ethernet0."""
    return Topology(
        ts_ns=T0,
        devices=[
            Device("h1", "host"),
            Device("h1-nic", "nic", host="h1"),
            Device("leaf0", "leaf"),
            Device("spine0", "spine"),
        ],
        links=[Link("h1-nic", "1", "leaf0", "Ethernet0"), Link("leaf0", "Ethernet32", "spine0", "Ethernet0")],
        nics=[NicAttachment("h1", "h1-nic", "1", "leaf0", "Ethernet0")],
    )


def test_pause_tree_walks_to_the_nic_that_pauses_without_being_paused():
    """NIC h1 stalls: leaf0 Ethernet0 (facing it) is stormed, then spine0 Ethernet0 (facing leaf0's
    uplink) is stormed because leaf0 pauses its uplink. One incident, rooted at the NIC."""
    topo = nic_leaf_spine()
    stage = Stage1(DetectorConfig())
    stage.set_topology(topo)
    corr = Correlator(fabric=FabricMap(topo))
    leaf, spine = Switch("leaf0", ["Ethernet0", "Ethernet32"]), Switch("spine0", ["Ethernet0", "Ethernet8"])
    events = []
    for step in range(4):
        snaps = [
            leaf.poll(1.0, **storm("Ethernet0")),
            spine.poll(1.0, **(storm("Ethernet0") if step else {})),
        ]
        for s in snaps:
            for sym in stage.process(s)[1]:
                corr.on_symptom(sym)
        events += corr.tick(leaf.ts)
    assert [e.status for e in events][:1] == ["firing"]
    roots = {(e.root.device, e.root.port) for e in events}
    assert roots == {("h1-nic", "1")}
    assert events[-1].devices == ["leaf0", "spine0"] and events[-1].evidence["paused_ports"] == 2
    assert events[-1].evidence["hops"] == 2
    assert (
        events[-1].evidence["tree"]
        == "hop 1: leaf0:Ethernet0<-h1-nic:1; hop 2: spine0:Ethernet0<-leaf0:Ethernet32"
    )
    assert "h1" in events[-1].hosts


def test_congested_fabric_link_under_balanced_load_is_not_an_incast():
    """An oversubscribed uplink (heavy balanced AllReduce) marks ECN like an incast victim would; only
    the last hop toward a receiver NIC can be an incast victim."""
    topo = Topology(
        ts_ns=T0,
        devices=[Device("h1", "host"), Device("h1-nic", "nic", host="h1"), Device("leaf0", "leaf")],
        links=[Link("h1-nic", "1", "leaf0", "Ethernet0")],
        nics=[NicAttachment("h1", "h1-nic", "1", "leaf0", "Ethernet0")],
    )
    sw, stage = Switch("leaf0", PORTS), Stage1()
    stage.set_topology(topo)
    uplink = run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **incast("Ethernet40", PORTS[:4])) for _ in range(4)])
    assert not any(uplink)
    edge = run(stage, [sw.poll(1.0, **incast("Ethernet0", PORTS[1:5])) for _ in range(2)])
    assert edge[1] and edge[1][0].port == "Ethernet0"


def test_storm_unwinding_after_the_root_recovers_stays_one_incident():
    """The port facing the stalled NIC restores first; the spine it paused restores later. Cut off
    from the root, the spine port must not become an incident of its own."""
    topo = nic_leaf_spine()
    stage = Stage1()
    stage.set_topology(topo)
    corr = Correlator(fabric=FabricMap(topo))
    leaf, spine = Switch("leaf0", ["Ethernet0", "Ethernet32"]), Switch("spine0", ["Ethernet0", "Ethernet8"])
    events = []
    for step in range(12):
        leaf_storm = storm("Ethernet0") if step < 5 else {}
        spine_storm = storm("Ethernet0") if 1 <= step < 8 else {}
        for s in (leaf.poll(1.0, **leaf_storm), spine.poll(1.0, **spine_storm)):
            for sym in stage.process(s)[1]:
                corr.on_symptom(sym)
        events += corr.tick(leaf.ts)
    assert {e.fingerprint for e in events} == {events[0].fingerprint}
    assert events[0].status == "firing" and events[-1].status == "resolved"
    assert events[-1].root.device == "h1-nic"


NIC_COLS = [
    CounterSpec("tx_bytes"),
    CounterSpec("rx_bytes"),
    CounterSpec("tx_pfc_duration_us", index=3),
    CounterSpec("pause_storm_warning_events"),
]


def nic_poll(ts_ns: int, values: list[int]) -> Snapshot:
    return Snapshot(
        device="h1/mlx5_0", device_kind="nic", ts_ns=ts_ns, counters=NIC_COLS, ports=["1"], values=[values]
    )


def test_nic_firmware_storm_warning_catches_a_storm_in_the_poll_it_began():
    """At 1 s polls a storm that began 0.3 s into an interval is paused for only 70% of it: the
    switch watchdog must wait a poll, but the NIC firmware already counted a pause-storm warning."""
    stage = Stage1()
    base = [10**12, 10**12, 10**9, 0]
    out = [stage.process(nic_poll(T0, base))[1]]
    out.append(stage.process(nic_poll(T0 + 10**9, [10**12 + 10**9, 10**12 + 10**9, 10**9 + 700_000, 1]))[1])
    (sym,) = out[1]
    assert (sym.kind, sym.device, sym.priority, sym.active) == ("pfc_pausing", "h1/mlx5_0", 3, True)
    assert sym.start_ns == T0 + 300_000_000  # pausing began 0.7 s before the read


def test_nic_pausing_briefly_without_firmware_warning_is_not_a_storm():
    """Flow control at a busy NIC: 40% of the time paused in short bursts, no storm warning."""
    stage = Stage1()
    values = [10**12, 10**12, 10**9, 0]
    for t in range(1, 6):
        values = [values[0] + 10**9, values[1] + 10**9, values[2] + 400_000, 0]
        assert stage.process(nic_poll(T0 + t * 10**9, values))[1] == []


def test_nic_pausing_and_the_paused_leaf_port_are_one_incident_rooted_at_the_nic():
    corr = Correlator(fabric=FabricMap(nic_leaf_spine()))
    corr.on_symptom(Symptom("pfc_pausing", "h1-nic", T0 + 10**9, T0 + 3 * 10**8, port="1", priority=3))
    (first,) = corr.tick(T0 + 10**9)
    corr.on_symptom(Symptom("pfc_storm", "leaf0", T0 + 2 * 10**9, T0 + 10**9, port="Ethernet0", priority=3))
    (update,) = corr.tick(T0 + 2 * 10**9)
    assert (first.status, update.status) == ("firing", "updated")
    assert first.fingerprint == update.fingerprint
    assert (update.root.device, update.root.port, update.start_ns) == ("h1-nic", "1", T0 + 3 * 10**8)
    assert update.devices == ["h1-nic", "leaf0"]


def test_ecmp_collapse_on_a_switch_read_faster_than_it_refreshes_fires_and_holds():
    """Found (issue 15, classes 1 and 5): a switch refreshing every second, polled every half
    second, showed every other read unchanged; the collapse's streak restarted on each and it was
    found late or split. An unchanged read is unknown: the streak neither grows nor breaks, the
    report is said again, and persistence counts time (three polls' worth), not frames."""
    uplinks = PORTS[2:6]
    sw, stage = Switch("leaf0", PORTS), Stage1()
    stage.set_topology(ecmp_topology(uplinks))
    collapsed = {
        "tx_bytes": dict(zip(uplinks, [0.97 * LINE_Bps, 0.01 * LINE_Bps, 0.0, 0.02 * LINE_Bps], strict=True))
    }
    snaps = [sw.poll(1.0, **collapsed)]
    for _ in range(6):
        snaps.append(msgspec.structs.replace(snaps[-1], ts_ns=snaps[-1].ts_ns + 500_000_000))  # not refreshed
        snaps.append(sw.poll(1.0, **collapsed))
    out = run(stage, snaps)
    fired = next(i for i, polls in enumerate(out) if polls)
    assert fired <= 4, "within three polls' time of known skew (two refreshes of one second each)"
    assert all(polls and polls[0].active for polls in out[fired:]), "held through every unchanged read"
    assert stage.rates.stats.stale == 5  # the first repeat follows the first read: nothing was moving yet


def test_an_ecmp_collapse_swinging_around_saturation_stays_critical():
    """Found on heavy_faults_500ms_64h: the hot uplink read 0.95, 0.86, 1.00, 0.88 ... of line
    rate, and the incident flipped warning/critical with it, a new alert to every receiver each
    time. Severity is the incident's worst, like its peak queue."""
    corr = Correlator(fabric=FabricMap(ecmp_topology(PORTS[2:6])))
    events = []
    for i, hot in enumerate([0.95, 0.86, 1.0, 0.88, 0.91, 0.8]):
        ts = T0 + i * 10**9
        evidence = {"hot_utilisation": hot, "entropy": 0.1, "max_over_mean": 3.8, "shares": "0.97,0.03"}
        corr.on_symptom(Symptom("ecmp_imbalance", "leaf0", ts, T0, group="uplinks", evidence=evidence))
        events += corr.tick(ts)
    assert events[0].status == "firing"
    assert [e.severity for e in events] == ["critical"] * len(events)


def without_gauge(snap: Snapshot) -> Snapshot:
    """The snapshot as a switch with watermarks but no queue-depth gauge exports it, with the queue's
    packets (4 KiB each) beside its bytes."""
    gauge = next(i for i, c in enumerate(COLS) if c.name == "queue_occupancy_bytes")
    queue_bytes = next(i for i, c in enumerate(COLS) if c.name == "queue_tx_bytes")
    counters = [c for i, c in enumerate(COLS) if i != gauge] + [CounterSpec("queue_tx_packets", index=3)]
    values = [
        [v for i, v in enumerate(row) if i != gauge] + [row[queue_bytes] // 4096] for row in snap.values
    ]
    return msgspec.structs.replace(snap, counters=counters, values=values)


def test_a_whole_poll_of_standing_incast_without_a_depth_gauge_is_reported_at_once():
    """Found (issue 15, class 3): on switches exporting watermarks but no current depth, an incast
    waited two polls (missed when shorter). Marks prove the queue stood: at line rate, watermark
    deep and 12% of the queue's packets marked (WRED at the band's middle marks 10%), one poll is
    enough; a deep peak with few marks is still a burst the buffer absorbed."""
    feeders = PORTS[1:5]
    sw, stage = Switch("leaf0", PORTS), Stage1()
    standing = {**incast("Ethernet0", feeders), "queue_ecn_marked_packets": {"Ethernet0": 1.5e6}}
    out = run(stage, [without_gauge(sw.poll(1.0)), without_gauge(sw.poll(1.0, **standing))])
    assert out[1] and out[1][0].kind == "incast" and out[1][0].port == "Ethernet0"

    sw, stage = Switch("leaf0", PORTS), Stage1()
    peaked = {**incast("Ethernet0", feeders), "queue_ecn_marked_packets": {"Ethernet0": 3e5}}
    out = run(stage, [without_gauge(sw.poll(1.0)), without_gauge(sw.poll(1.0, **peaked))])
    assert out[1] == [], "one poll of a deep peak with few marks waits for a second"


def test_a_storm_keeps_its_streak_and_start_through_a_snapshot_not_refreshed():
    """Found (issue 15, class 1, and CI: tests/collectors/test_sonic_storm.py once rooted a storm at
    the leaf): a switch read before it refreshed repeats its last snapshot, whose rates are unknown. That poll
    broke the storm's streak, so the storm restarted later, and a port it paused upstream, walking
    to a root not yet storming, named the leaf as root. Unknown neither grows nor breaks a streak."""
    sw, stage = Switch("leaf0", ["Ethernet0", "Ethernet8"]), Stage1()
    snaps = [sw.poll(0.1)] + [sw.poll(0.1, **storm("Ethernet0")) for _ in range(3)]
    snaps.append(msgspec.structs.replace(snaps[-1], ts_ns=snaps[-1].ts_ns + 100_000_000))  # not refreshed
    sw.ts += 100_000_000
    snaps.append(sw.poll(0.1, **storm("Ethernet0")))
    out = run(stage, snaps)
    assert stage.rates.stats.stale == 1
    starts = [s.start_ns for poll in out for s in poll]
    assert all(s.active for poll in out[2:] for s in poll) and out[4] and out[5]
    assert set(starts) == {T0 + int(0.1e9)}, "one storm, begun with the first stormed interval"


def test_a_nic_pause_storm_is_not_calmed_by_a_poll_without_data():
    """Unknown is not calm: a NIC snapshot whose pause counter is unknown must not count toward the
    storm's restoration time."""
    stage = Stage1()
    values = [10**12, 10**12, 10**9, 0]
    out = []
    for t in range(1, 4):
        values = [values[0] + 10**9, values[1] + 10**9, values[2] + 10**6, 0]  # paused all second
        out.append(stage.process(nic_poll(T0 + t * 10**9, values))[1])
    out.append(stage.process(nic_poll(T0 + 4 * 10**9, values))[1])  # repeated: not refreshed
    values = [values[0] + 2 * 10**9, values[1] + 2 * 10**9, values[2] + 2 * 10**6, 0]
    out.append(stage.process(nic_poll(T0 + 5 * 10**9, values))[1])
    assert all(s.active for poll in out[1:] for s in poll) and out[-1]
