"""The fabric's topology as the detectors see it: the whole fabric, plus what each host and each
switch saw.

A topology file knows the switches, their links and ECMP groups and the pods; it is often stale
about which leaf port each NIC is cabled to, and a recabled node makes an incast or a storm point at
the wrong port. Each host's collector reads its own cabling from LLDP and reports it
(``Topology.source = "host:NAME"``); each SONiC switch's collector reports the switches it sees
(``"switch:NAME"``: its links and ECMP groups). The merged view takes the file for everything,
each host's latest report for that host's NICs, and each switch's latest report for that switch's
ports: a link the switch reports replaces the file's links on the same port, its ECMP groups
replace the file's groups of that switch, its queue profiles (ECN marking curves read from its
own configuration) replace the file's for that switch, and devices the file lacks are added. A new
whole-fabric topology replaces the file's part and keeps the reports.
"""

from __future__ import annotations

from fabricwatch.schemas.messages import Device, Link, NicAttachment, Topology


class TopologyView:
    """Folds whole-fabric, per-host and per-switch Topology messages into the one the detectors use."""

    def __init__(self) -> None:
        self._fabric: Topology | None = None
        self._reports: dict[str, Topology] = {}

    def add(self, topology: Topology) -> Topology:
        """Take one message; return the merged topology to hand to the detectors."""
        if topology.source:
            self._reports[topology.source] = topology
        else:
            self._fabric = topology
        return self.merged()

    def merged(self) -> Topology:
        base = self._fabric or Topology(ts_ns=0, devices=[], links=[])
        if not self._reports:
            return base
        devices: dict[str, Device] = {d.id: d for d in base.devices}
        nics: dict[str, NicAttachment] = {a.nic: a for a in base.nics}
        switches = [r for s, r in self._reports.items() if s.startswith("switch:")]
        seen_ports = {(link.a_device, link.a_port) for r in switches for link in r.links}
        reporting = {r.source.removeprefix("switch:") for r in switches}
        links = [link for link in base.links if not _touches(link, seen_ports)]
        groups = [g for g in base.ecmp_groups if g.device not in reporting]
        profiled = {p.device for r in switches for p in r.queue_profiles}
        profiles = [p for p in base.queue_profiles if p.device not in profiled]
        ts_ns = base.ts_ns
        for report in self._reports.values():
            for device in report.devices:
                devices.setdefault(device.id, device)
            for attachment in report.nics:
                nics[attachment.nic] = attachment
            ts_ns = max(ts_ns, report.ts_ns)
        for report in switches:
            links += [link for link in report.links if not _touches(link, _ends(links))]
            groups += report.ecmp_groups
            profiles += report.queue_profiles
        return Topology(
            ts_ns=ts_ns,
            devices=list(devices.values()),
            links=links,
            ecmp_groups=groups,
            nics=list(nics.values()),
            queue_profiles=profiles,
        )


def _ends(links: list[Link]) -> set[tuple[str, str]]:
    return {(link.a_device, link.a_port) for link in links} | {(link.b_device, link.b_port) for link in links}


def _touches(link: Link, ports: set[tuple[str, str]]) -> bool:
    return (link.a_device, link.a_port) in ports or (link.b_device, link.b_port) in ports
