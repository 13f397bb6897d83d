"""The fabric's topology from LLDP over gNMI, as gnmic (event format) and Telegraf (JSON
serializer) write it to Kafka: one leaf per message, the table reported once it settles, a
neighbour that leaves (a gnmic delete) taken out, hosts left to report their own cabling.

The gnmic messages are built in the shape of gnmic's event formatter (pkg/formatters/event.go:
the path's keys as ``<elem>_<key>`` tags, the path without keys as the value's name, deletes as
paths with their keys in the tags) over openconfig-lldp's neighbour state leaves; the SR Linux
native paths are those the gnmic docs' topology-cloning action reads
(docs/user_guide/actions/actions.md)."""

from __future__ import annotations

import json

from helpers.snapshots import Clock

from fabricwatch.detectors.topology import TopologyView
from fabricwatch.ingest.gnmi.messages import parse_message
from fabricwatch.ingest.gnmi.snapshots import SnapshotAssembler
from fabricwatch.ingest.gnmi.topology import LldpAssembler
from fabricwatch.ingest.lldp.fabric import SiteSettings
from fabricwatch.schemas.messages import EcmpGroup, Link

OC = "/lldp/interfaces/interface/neighbors/neighbor/state"
SPEED = "openconfig-if-ethernet:/interfaces/interface/ethernet/state/port-speed"
SITE = SiteSettings(spines=["spine*"])
TS = 1_700_000_000_000_000_000


def event(device: str, port: str, values: dict, neighbour: str | None = None, ts: int = TS) -> bytes:
    tags = {"source": f"{device}:57400", "subscription-name": "lldp", "interface_name": port}
    if neighbour is not None:
        tags["neighbor_id"] = neighbour
    return json.dumps([{"name": "lldp", "timestamp": ts, "tags": tags, "values": values}]).encode()


def lldp_events(device: str, port: str, far: str, far_port: str, kind: str = "INTERFACE_NAME") -> list[bytes]:
    """A neighbour as a SAMPLE subscription delivers it: one leaf per notification."""
    leaves = {
        "system-name": far,
        "port-id": far_port,
        "port-id-type": kind,
        "chassis-id": "0c:42:a1:00:00:01",
    }
    nid = f"{far}|{far_port}"
    return [event(device, port, {f"{OC}/{leaf}": value}, nid) for leaf, value in leaves.items()]


def feed(lldp: LldpAssembler, messages: list[bytes]) -> None:
    for raw in messages:
        parsed = parse_message("gnmic", raw)
        assert parsed.problems == [] and parsed.points == []
        lldp.add(parsed.texts)


def leaf01_messages() -> list[bytes]:
    return [
        *lldp_events("leaf01", "Ethernet1/1", "spine01", "Ethernet1/1"),
        *lldp_events("leaf01", "Ethernet1/2", "spine02", "Ethernet1/1"),
        *lldp_events("leaf01", "Ethernet1/9", "gpu-node-7", "0c:42:a1:7f:00:10", kind="MAC_ADDRESS"),
        event("leaf01", "Ethernet1/1", {SPEED: "openconfig-if-ethernet:SPEED_400GB"}),
        event("leaf01", "Ethernet1/2", {SPEED: "SPEED_200GB"}),
    ]


def test_a_switch_s_lldp_table_becomes_its_links_and_uplink_group_once_it_settles():
    clock = Clock()
    lldp = LldpAssembler(SITE, settle_s=2.0, clock=clock, wall_ns=lambda: 7)
    feed(lldp, leaf01_messages()[:5])
    assert lldp.due() == [], "a table still being delivered is not reported"
    clock.now = 1.0
    feed(lldp, leaf01_messages()[5:])
    clock.now = 2.5
    assert lldp.due() == [], "the last leaf came 1.5 s ago"
    clock.now = 3.0
    (report,) = lldp.due()
    assert report.source == "switch:leaf01" and report.ts_ns == 7
    assert report.links == [
        Link("leaf01", "Ethernet1/1", "spine01", "Ethernet1/1", 400.0),
        Link("leaf01", "Ethernet1/2", "spine02", "Ethernet1/1", 200.0),
    ], "the host on Ethernet1/9 reports its own cabling"
    assert report.ecmp_groups == [
        EcmpGroup("leaf01/uplinks", "leaf01", ["Ethernet1/1", "Ethernet1/2"], "spines")
    ]
    assert lldp.due() == [], "said once"
    feed(lldp, leaf01_messages())  # the next SAMPLE interval: the same table again
    clock.now = 10.0
    assert lldp.due() == [], "nothing changed: not said again before resend_s"
    clock.now = 400.0
    assert [r.links for r in lldp.due()] == [report.links], "said again for workers that start later"


def test_a_neighbour_that_leaves_is_taken_out_and_the_group_follows():
    clock = Clock()
    lldp = LldpAssembler(SITE, settle_s=1.0, clock=clock)
    feed(lldp, leaf01_messages())
    clock.now = 2.0
    assert len(lldp.due()[0].links) == 2
    gone = {
        "name": "lldp",
        "timestamp": TS + 10**9,
        "tags": {
            "source": "leaf01:57400",
            "interface_name": "Ethernet1/2",
            "neighbor_id": "spine02|Ethernet1/1",
        },
        "deletes": ["/lldp/interfaces/interface/neighbors/neighbor"],
    }
    feed(lldp, [json.dumps([gone]).encode()])
    assert lldp.stats.deletes == 1
    clock.now = 4.0
    (report,) = lldp.due()
    assert [(link.a_port, link.b_device) for link in report.links] == [("Ethernet1/1", "spine01")]
    assert report.ecmp_groups == [], "one uplink left is no group"


def test_a_switch_that_sends_no_lldp_reports_nothing_not_an_empty_table():
    clock = Clock()
    lldp = LldpAssembler(SITE, settle_s=1.0, clock=clock)
    feed(lldp, [event("leaf05", "Ethernet1/1", {SPEED: "SPEED_400GB"})])
    clock.now = 500.0
    assert lldp.due() == []


def test_telegraf_and_sr_linux_native_lldp_give_the_same_links():
    clock = Clock()
    lldp = LldpAssembler(SITE, settle_s=1.0, clock=clock)
    metric = {
        "name": "lldp",
        "tags": {
            "source": "leaf02",
            "path": "/lldp/interfaces/interface/neighbors/neighbor/state",
            "name": "Ethernet1/1",
            "id": "1",
        },
        "fields": {
            "system_name": "spine01",
            "port_id": "Eth2(Port2)",
            "port_id_type": "LOCAL",
            "port_description": "Ethernet1/2",
        },
        "timestamp": TS // 10**9,
    }
    lldp.add(parse_message("telegraf", json.dumps(metric).encode()).texts)
    srl = "/srl_nokia-system:system/srl_nokia-lldp:lldp/interface/neighbor"
    feed(
        lldp,
        [
            event("leaf03", "ethernet-1/49", {f"{srl}/system-name": "spine01"}, "1A:2B:3C:4D:5E:6F"),
            event("leaf03", "ethernet-1/49", {f"{srl}/port-id": "ethernet-1/3"}, "1A:2B:3C:4D:5E:6F"),
        ],
    )
    clock.now = 2.0
    reports = {r.source: r for r in lldp.due()}
    assert reports["switch:leaf02"].links == [
        Link("leaf02", "Ethernet1/1", "spine01", "Ethernet1/2", 400.0)
    ], "a locally assigned port id: the description names the port"
    assert reports["switch:leaf03"].links == [
        Link("leaf03", "ethernet-1/49", "spine01", "ethernet-1/3", 400.0)
    ]


def test_counters_and_lldp_in_one_stream_go_their_own_ways_and_merge_into_the_fabric():
    clock = Clock()
    lldp = LldpAssembler(SITE, settle_s=1.0, clock=clock)
    snapshots = SnapshotAssembler(grace_s=1.0, clock=clock, warn=lambda _: None)
    octets = event("leaf01", "Ethernet1/1", {"/interfaces/interface/state/counters/out-octets": "1000"})
    for raw in [*leaf01_messages(), octets]:
        parsed = parse_message("gnmic", raw)
        snapshots.add(parsed.points)
        lldp.add(parsed.texts)
    assert snapshots.stats.unknown_paths == 0 and snapshots.stats.points == 1
    clock.now = 2.0
    (snap,) = snapshots.due()
    assert snap.ports == ["Ethernet1/1"]
    view = TopologyView()
    merged = view.add(lldp.due()[0])
    assert {(link.a_device, link.b_device) for link in merged.links} == {
        ("leaf01", "spine01"),
        ("leaf01", "spine02"),
    }
