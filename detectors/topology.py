"""The fabric's topology as the detectors see it: the whole fabric, plus what each host saw.

A topology file knows the switches, their links and ECMP groups and the pods; it is often stale
about which leaf port each NIC is cabled to, and a recabled node makes an incast or a storm point at
the wrong port. Each host's collector reads its own cabling from LLDP and reports it
(``Topology.source = "host:NAME"``). The merged view takes the file for everything and each host's
latest report for that host's NICs: a host's attachment replaces the file's for the same NIC, and
devices the file lacks (the NIC, a leaf only LLDP has seen) are added. A new whole-fabric topology
replaces the file's part and keeps the hosts' reports.
"""

from __future__ import annotations

from fabricwatch.schemas.messages import Device, NicAttachment, Topology


class TopologyView:
    """Folds whole-fabric and per-host Topology messages into the one the detectors use."""

    def __init__(self) -> None:
        self._fabric: Topology | None = None
        self._hosts: dict[str, Topology] = {}

    def add(self, topology: Topology) -> Topology:
        """Take one message; return the merged topology to hand to the detectors."""
        if topology.source:
            self._hosts[topology.source] = topology
        else:
            self._fabric = topology
        return self.merged()

    def merged(self) -> Topology:
        base = self._fabric or Topology(ts_ns=0, devices=[], links=[])
        if not self._hosts:
            return base
        devices: dict[str, Device] = {d.id: d for d in base.devices}
        nics: dict[str, NicAttachment] = {a.nic: a for a in base.nics}
        ts_ns = base.ts_ns
        for report in self._hosts.values():
            for device in report.devices:
                devices.setdefault(device.id, device)
            for attachment in report.nics:
                nics[attachment.nic] = attachment
            ts_ns = max(ts_ns, report.ts_ns)
        return Topology(
            ts_ns=ts_ns,
            devices=list(devices.values()),
            links=base.links,
            ecmp_groups=base.ecmp_groups,
            nics=list(nics.values()),
        )
