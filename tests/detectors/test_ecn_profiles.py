"""Incast on fabrics whose ECN profile is not the configured one (issue 15, class 2).

Found: on a shallow-buffer fabric (WRED 50 KiB-400 KiB, XOFF 600 KiB) a queue never reaches the
middle of the default 150 KB-1.5 MB band, so incasts were missed until thresholds were set by hand.
Now the band is the switch's own where the topology carries it, and without one the share of
packets the switch marks says how deep its queue stood."""

from __future__ import annotations

import msgspec
import numpy as np
from helpers.switch_polls import PORTS, SHALLOW, LINE_Bps, Switch, incast, run, shallow_topology

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.schemas.messages import CounterSpec, QueueProfile, Snapshot

MTU = 4096


def with_packets(snap: Snapshot) -> Snapshot:
    """The snapshot with the queue's packets (4 KiB each) beside its bytes, as switches count them."""
    queue_bytes = next(i for i, c in enumerate(snap.counters) if c.name == "queue_tx_bytes")
    counters = [*snap.counters, CounterSpec("queue_tx_packets", index=3)]
    values = [[*row, row[queue_bytes] // MTU] for row in snap.values]
    return msgspec.structs.replace(snap, counters=counters, values=values)


def shallow_incast(marked_share: float, watermark: float = 380e3) -> dict:
    """A many-to-one queue on the shallow fabric: past its Kmax, far below the default band's middle."""
    return {
        **incast("Ethernet0", PORTS[1:5], watermark),
        "queue_ecn_marked_packets": {"Ethernet0": marked_share * 0.98 * LINE_Bps / MTU},
    }


def test_a_shallow_fabric_s_incast_is_found_by_its_marks_without_any_threshold_set():
    sw, stage = Switch("leaf0", PORTS), Stage1()
    polls = [sw.poll(1.0)] + [sw.poll(1.0, **shallow_incast(0.45)) for _ in range(3)]
    out = run(stage, [with_packets(s) for s in polls])
    assert out[1] and out[1][0].kind == "incast" and out[1][0].port == "Ethernet0"
    assert out[1][0].evidence["deep_by"] == "marks" and out[1][0].evidence["ecn_profile"] == "config"
    assert all(out[1:]) and len({s.start_ns for poll in out for s in poll}) == 1


def test_a_milder_incast_held_inside_a_shallow_band_is_found_by_its_marks_at_line_rate():
    """Found (issue 33, item 4): on 100G with WRED 50-400 KiB at pmax 0.1, three senders at 60 %
    keep the queue at 270-370 KB and mark 7 % of its packets, poll after poll: below the middle of
    the default band by depth (0.1) and by marks read against the default pmax (0.44), so it was
    missed on every seed. Its port at line rate all poll while the queue marks proves arrivals
    above its rate; the depth read once a poll falls below the default Kmin half the time (item
    7c), and the queue still counts as standing. Found in two polls, the first a partial one."""
    sw, stage = Switch("leaf0", PORTS), Stage1()
    begin = {**shallow_incast(0.047, watermark=344e3), "tx_bytes": {"Ethernet0": 0.43 * LINE_Bps}}
    polls = [sw.poll(1.0), sw.poll(1.0, **begin)]
    for i in range(4):
        held = shallow_incast(0.07, watermark=330e3 + 10e3 * i)
        held["queue_occupancy_bytes"] = {"Ethernet0": 120e3 if i % 2 else 300e3}  # one read a poll
        polls.append(sw.poll(1.0, **held))
    out = run(stage, [with_packets(s) for s in polls])
    assert not out[1] and out[2], "found in the second poll of it"
    (found,) = out[2]
    assert found.kind == "incast" and found.port == "Ethernet0"
    assert found.evidence["deep_by"] == "line_rate_marks"
    assert all(out[2:]), "one incast throughout, its queue read below Kmin or not"
    assert len({s.start_ns for poll in out for s in poll}) == 1


def test_bursts_that_mark_but_never_run_a_poll_at_line_rate_are_not_an_incast():
    """The first-poll allowance is only a start: bursts marking 7 % of their packets, the queue
    caught standing at each read, with the port at 40 % all poll, never go on to an incast."""
    sw, stage = Switch("leaf0", PORTS), Stage1()
    burst = {**shallow_incast(0.07, watermark=344e3), "tx_bytes": {"Ethernet0": 0.4 * LINE_Bps}}
    out = run(stage, [with_packets(s) for s in [sw.poll(1.0)] + [sw.poll(1.0, **burst) for _ in range(6)]])
    assert not any(out)


def test_a_link_held_near_kmin_by_dcqcn_marks_little_and_is_not_an_incast():
    """A busy link with a few senders marks a fraction of a percent of its packets: a link doing its
    job, on a shallow fabric as on any other."""
    sw, stage = Switch("leaf0", PORTS), Stage1()
    held = shallow_incast(0.005, watermark=70e3)
    out = run(stage, [with_packets(s) for s in [sw.poll(1.0)] + [sw.poll(1.0, **held) for _ in range(5)]])
    assert not any(out)


def test_the_topology_s_profile_sets_the_band_where_marks_are_not_counted():
    """A switch that counts marks but not the queue's packets gives no marked share: the depth
    against its own band, from the topology, finds the incast; the configured band does not."""
    profile = QueueProfile("leaf0", **SHALLOW, ecn_pmax=0.2)
    found = []
    for topology in (None, shallow_topology(profile)):
        sw, stage = Switch("leaf0", PORTS), Stage1()
        if topology is not None:
            stage.set_topology(topology)
        found.append(run(stage, [sw.poll(1.0)] + [sw.poll(1.0, **shallow_incast(0.45)) for _ in range(3)]))
    assert not any(found[0])
    (symptom,) = found[1][1]
    assert symptom.evidence["ecn_profile"] == "topology" and symptom.evidence["deep_by"] == "depth"
    assert symptom.evidence["ecn_kmin_bytes"] == 51_200


def test_the_most_specific_profile_applies_to_each_queue():
    fabric = FabricMap(
        shallow_topology(
            QueueProfile("leaf0", 100e3, 1e6),
            QueueProfile("leaf0", 50e3, 400e3, port="Ethernet8"),
            QueueProfile("leaf0", 20e3, 200e3, 0.5, port="Ethernet8", queue=4),
        )
    )
    curve = fabric.ecn_curve("leaf0", ["Ethernet0", "Ethernet8"], np.array([3, 4]))
    assert curve is not None
    assert curve.kmin.tolist() == [[100e3, 100e3], [50e3, 20e3]]
    assert np.isnan(curve.pmax[0, 0]) and curve.pmax[1, 1] == 0.5
    assert fabric.ecn_curve("spine0", ["Ethernet0"], np.array([3])) is None
