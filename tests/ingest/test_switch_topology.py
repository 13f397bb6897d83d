"""The fabric's topology from the switches' own LLDP tables, merged with a topology file: each
switch's report is authoritative for its ports (recabled uplinks move, ECMP groups follow)."""

from __future__ import annotations

import pytest

from fabricwatch.detectors.topology import TopologyView
from fabricwatch.ingest.lldp.fabric import Neighbour, SiteEcnProfile, SiteSettings, switch_topology
from fabricwatch.ingest.sonic.poll import SonicSettings
from fabricwatch.schemas.config import ConfigError, ConfigFile
from fabricwatch.schemas.messages import Device, EcmpGroup, Link, QueueProfile, Topology

SITE = SiteSettings(spines=["spine*"], pods={"leaf0*": "pod0"}, link_gbps=200)


def test_a_leaf_s_neighbours_become_links_devices_and_its_uplink_group():
    seen = [
        Neighbour("Ethernet0", "spine01", "Ethernet1"),
        Neighbour("Ethernet4", "spine02", "Ethernet8"),
        Neighbour("Ethernet8", "gpu7", "ens1f0np0"),  # a host: it reports its own cabling
    ]
    report = switch_topology("leaf01", seen, {"Ethernet0": 400.0}, {"leaf01", "spine01"}, SITE, 5)
    assert report.source == "switch:leaf01"
    assert {(d.id, d.kind, d.pod) for d in report.devices} == {
        ("leaf01", "leaf", "pod0"),
        ("spine01", "spine", ""),
        ("spine02", "spine", ""),
    }
    assert report.links == [
        Link("leaf01", "Ethernet0", "spine01", "Ethernet1", 400.0),
        Link("leaf01", "Ethernet4", "spine02", "Ethernet8", 200.0),  # no PORT_TABLE speed: the site's
    ]
    assert report.ecmp_groups == [EcmpGroup("leaf01/uplinks", "leaf01", ["Ethernet0", "Ethernet4"], "spines")]


def test_a_spine_groups_its_links_to_each_leaf():
    seen = [Neighbour(f"Ethernet{4 * i}", "leaf01", f"Ethernet{64 + 4 * i}") for i in range(2)]
    seen.append(Neighbour("Ethernet8", "leaf02", "Ethernet64"))
    report = switch_topology("spine01", seen, {}, {"leaf01", "leaf02"}, SITE, 5)
    assert report.ecmp_groups == [
        EcmpGroup("spine01/leaf01", "spine01", ["Ethernet0", "Ethernet4"], "leaf01")
    ]


def test_switch_reports_replace_the_file_s_links_on_their_ports_and_their_groups():
    devices = [Device("leaf01", "leaf"), Device("spine01", "spine"), Device("spine02", "spine")]
    stale = [
        Link("leaf01", "Ethernet0", "spine01", "Ethernet1"),
        Link("leaf01", "Ethernet4", "spine01", "Ethernet5"),  # recabled since: now to spine02
    ]
    file = Topology(1, devices, stale, [EcmpGroup("leaf01/uplinks", "leaf01", ["Ethernet0", "Ethernet4"])])
    seen = [Neighbour("Ethernet0", "spine01", "Ethernet1"), Neighbour("Ethernet4", "spine02", "Ethernet8")]
    report = switch_topology("leaf01", seen, {}, {"leaf01"}, SITE, 5)
    view = TopologyView()
    view.add(file)
    merged = view.add(report)
    assert sorted((link.a_port, link.b_device, link.b_port) for link in merged.links) == [
        ("Ethernet0", "spine01", "Ethernet1"),
        ("Ethernet4", "spine02", "Ethernet8"),
    ]
    assert [g.members for g in merged.ecmp_groups] == [["Ethernet0", "Ethernet4"]]
    spine_view = switch_topology(
        "spine02", [Neighbour("Ethernet8", "leaf01", "Ethernet4")], {}, {"leaf01"}, SITE, 6
    )
    assert len(view.add(spine_view).links) == 2  # the same cable seen from its other end: not twice


def test_an_incident_rooted_at_a_device_the_topology_lacks_says_so(tmp_path):
    """A storm at a NIC the topology does not know (a host added since the file was written, no
    LLDP report yet): the anomaly says its root could not be checked, instead of a confident guess."""
    from fabricwatch.detectors.config import DetectorConfig
    from fabricwatch.detectors.pipeline import Pipeline
    from fabricwatch.ingest.simulator.run import simulate
    from fabricwatch.ingest.simulator.scenario import load_scenario
    from fabricwatch.replay import replay_trace
    from fabricwatch.schemas.messages import decode, encode
    from fabricwatch.schemas.trace import TraceReader, TraceWriter

    scenario = tmp_path / "storm.yaml"
    scenario.write_text(
        "name: s\ndescription: s\nseed: 3\nduration: 16\npoll_interval: 0.5\n"
        "fabric: {leaves: 2, spines: 2, hosts_per_leaf: 4}\n"
        "jobs: [{name: llm-a, hosts: 8, placement: spread,\n"
        "        schedule: [{op: AllReduce, begin: 0, end: 16, load: 0.3}]}]\n"
        "faults: [{kind: pfc_storm, root: h002, start: 5, duration: 8, propagation_delay: 0.4}]\n"
    )
    full, partial = tmp_path / "full.trace", tmp_path / "partial.trace"
    simulate(load_scenario(scenario), full)
    with TraceReader(full) as reader, TraceWriter(partial, "test", 1) as writer:
        for rec in reader:
            if rec.topic == "fabric.topology":
                topo = decode(rec.value(), Topology)
                topo = Topology(
                    topo.ts_ns,
                    [d for d in topo.devices if not d.id.startswith("h002")],
                    [link for link in topo.links if "h002" not in (link.a_device + link.b_device)],
                    topo.ecmp_groups,
                    [a for a in topo.nics if a.host != "h002"],
                )
                writer.write(rec.topic, rec.key, rec.ts_ns, encode(topo))
            else:
                writer.write(rec.topic, rec.key, rec.ts_ns, rec.value())

    def storms(path):
        found = replay_trace(path, Pipeline(DetectorConfig())).anomalies
        return [a for a in found if a.kind == "pfc_storm"]

    known, lacking = storms(full), storms(partial)
    assert known and all("topology" not in a.summary for a in known)
    at_nic = [a for a in lacking if a.root.device == "h002/mlx5_0"]
    assert at_nic and all("h002/mlx5_0 is not in the topology" in a.summary for a in at_nic)
    assert at_nic[0].evidence["root_in_topology"] == 0
    # the pause tree stops at the leaf port the NIC hangs off: it says so, and that it may not be the root
    at_leaf = [a for a in lacking if a.root.device != "h002/mlx5_0"]
    assert all("has no link in the topology" in a.summary for a in at_leaf)


def test_the_site_s_ecn_profiles_reach_the_switches_they_name_and_a_switch_report_replaces_the_file_s():
    site = SiteSettings(
        spines=["spine*"],
        ecn_profiles=[SiteEcnProfile("leaf*", 51_200, 409_600, 0.2, queue=3), SiteEcnProfile("spine*", 1, 2)],
    )
    report = switch_topology(
        "leaf01", [Neighbour("Ethernet0", "spine01", "Ethernet1")], {}, {"leaf01"}, site, 5
    )
    assert report.queue_profiles == [QueueProfile("leaf01", 51_200, 409_600, 0.2, queue=3)]
    devices = [Device("leaf01", "leaf"), Device("leaf02", "leaf")]
    fabric = Topology(
        ts_ns=1, devices=devices, links=[], queue_profiles=[QueueProfile(d.id, 150e3, 1.5e6) for d in devices]
    )
    view = TopologyView()
    view.add(fabric)
    merged = view.add(report)
    assert sorted((p.device, p.ecn_kmin_bytes) for p in merged.queue_profiles) == [
        ("leaf01", 51_200),
        ("leaf02", 150e3),
    ]


def test_a_site_ecn_profile_that_is_not_a_curve_is_named_in_the_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "sonic:\n  site:\n    ecn_profiles:\n"
        "      - {devices: 'leaf*', ecn_kmin_bytes: 400000, ecn_kmax_bytes: 50000}\n"
    )
    with pytest.raises(ConfigError) as caught:
        ConfigFile(path).section("sonic", SonicSettings)
    assert str(path) in str(caught.value) and "sonic.site.ecn_profiles[0]" in str(caught.value)
    assert "ecn_kmin_bytes < ecn_kmax_bytes" in str(caught.value)
