"""A PFC storm rooted at a switch (issue 15, "Also"): a leaf's egress queue holds data and sends
nothing without being paused (a deadlock, a stuck egress), and the leaf pauses the ports feeding it.
Before, nothing said so: the spine ports the leaf paused walked to the leaf's uplink port, a
different root for every uplink, and none of them the port that stopped."""

from __future__ import annotations

from helpers.switch_polls import T0, LINE_Bps, Switch, run, storm

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incidents import Correlator
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.schemas.messages import Device, Link, NicAttachment, Topology

LEAF_PORTS = ["Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24"]  # a host, a host, two uplinks
TOPOLOGY = Topology(
    ts_ns=T0,
    devices=[Device("leaf0", "leaf"), Device("spine0", "spine"), Device("spine1", "spine")],
    links=[
        Link("leaf0", "Ethernet16", "spine0", "Ethernet0"),
        Link("leaf0", "Ethernet24", "spine1", "Ethernet0"),
    ],
    nics=[
        NicAttachment("h0", "h0/mlx5_0", "1", "leaf0", "Ethernet0"),
        NicAttachment("h1", "h1/mlx5_0", "1", "leaf0", "Ethernet8"),
    ],
)
STALLED = {  # leaf0's queue toward h0: full, silent, not paused; leaf0 pausing both uplinks
    "queue_occupancy_bytes": {"Ethernet0": 2.2e6},
    "queue_watermark_bytes": {"Ethernet0": 2.2e6},
    "tx_pfc_frames": {"Ethernet16": 20_000, "Ethernet24": 20_000},
    "tx_bytes": {"Ethernet8": 0.3 * LINE_Bps},
    "queue_tx_bytes": {"Ethernet8": 0.3 * LINE_Bps},
}


def test_a_stalled_switch_egress_roots_the_storm_it_causes():
    stage, corr = Stage1(), Correlator(fabric=FabricMap(TOPOLOGY))
    stage.set_topology(TOPOLOGY)
    leaf, spines = (
        Switch("leaf0", LEAF_PORTS),
        [Switch(s, ["Ethernet0", "Ethernet8"]) for s in ("spine0", "spine1")],
    )
    events = []
    for i in range(4):  # 100 ms polls: the storm lasts long enough from the third
        polls = [leaf.poll(0.1, **STALLED if i else {})]
        polls += [s.poll(0.1, **storm("Ethernet0") if i else {}) for s in spines]
        for symptoms in run(stage, polls):
            for symptom in symptoms:
                corr.on_symptom(symptom)
        events += corr.tick(T0 + (i + 1) * 10**8)
    firing = [e for e in events if e.status == "firing"]
    assert len(firing) == 1, [e.summary for e in firing]
    (storm_event,) = firing
    assert (storm_event.root.device, storm_event.root.port) == ("leaf0", "Ethernet0")
    assert storm_event.evidence["stalled_egress"] == 1 and "h0" in storm_event.hosts
    assert "egress stalled unpaused" in storm_event.summary and "switch" in storm_event.hint


def test_a_queue_paused_from_downstream_or_one_that_drains_is_not_a_stalled_egress():
    stage = Stage1()
    stage.set_topology(TOPOLOGY)
    leaf = Switch("leaf0", LEAF_PORTS)
    paused = {**STALLED, "rx_pfc_frames": {"Ethernet0": 20_000}, "rx_pfc_duration_us": {"Ethernet0": 1e6}}
    draining = {
        **STALLED,
        "queue_tx_bytes": {"Ethernet0": 0.5 * LINE_Bps},
        "tx_bytes": {"Ethernet0": 0.5 * LINE_Bps},
    }
    quiet = {**STALLED, "tx_pfc_frames": {}}  # nothing backs up into the switch: not the storm's root
    for case in (paused, draining, quiet):
        out = run(stage, [leaf.poll(0.1)] + [leaf.poll(0.1, **case) for _ in range(4)])
        assert not [s for poll in out for s in poll if s.kind == "pfc_pausing"]
