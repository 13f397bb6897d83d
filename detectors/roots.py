"""Where an incident is rooted, from the topology: the walk of a pause tree to the port that pauses
others without being paused, the receiver of an incast, the NIC end of a lossy link."""

from __future__ import annotations

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incident_state import Group
from fabricwatch.schemas.messages import RootCause, Symptom


class Roots:
    def __init__(self, fabric: FabricMap) -> None:
        self.fabric = fabric

    def outlier_root(self, sym: Symptom) -> RootCause:
        """A link is one thing with two ends: an outlier on a host-facing switch port is rooted at
        the NIC behind it, where the other end's symptom (a lossy cable, a slowed NIC) lands too."""
        peer = self.fabric.peer(sym.device, sym.port)
        if peer is not None and self.fabric.is_nic(peer[0]):
            return RootCause(peer[0], peer[1])
        return RootCause(sym.device, sym.port)

    def incast_identity(self, sym: Symptom) -> RootCause:
        """An incast is into a host: a host with a NIC per rail is congested on every rail's leaf
        port at once, and that is one incident. Without topology, the port is the identity."""
        receiver = self.fabric.host_behind(sym.device, sym.port)
        if receiver is None:
            return RootCause(sym.device, sym.port, sym.priority)
        return RootCause(receiver, priority=sym.priority, group="receiver")

    def first_rail(self, group: Group) -> RootCause:
        """The victim port reported as root: the leaf port of the receiver's first congested NIC."""
        first = min(
            group.members, key=lambda s: (self.fabric.nic_behind(s.device, s.port) or "", s.device, s.port)
        )
        return RootCause(first.device, first.port, first.priority)

    def storm_root(
        self, sym: Symptom, storming: set[tuple[str, str]], pausing: set[tuple[str, str]] = frozenset()
    ) -> RootCause:
        """Where the walk ends; on a switch that has a port stalled without being paused (its
        ``pfc_pausing``), that port: the walk arrives through the ingress port the switch paused,
        but the pauses began at the egress that stopped draining."""
        (device, port), _ = self.walk_to_root(sym.device, sym.port, storming)
        stalled = sorted(p for d, p in pausing if d == device)
        if stalled and (device, port) not in pausing:
            port = stalled[0]
        return RootCause(device, port, sym.priority)

    def walk_to_root(
        self, device: str, port: str, storming: set[tuple[str, str]]
    ) -> tuple[tuple[str, str], int]:
        """Walk from a paused port to whoever pauses it, while that device is itself paused; return
        the root (the first pauser that is not paused; the port itself if its peer is unknown) and
        the number of hops."""
        hops, visited = 1, {(device, port)}
        while True:
            peer = self.fabric.peer(device, port)
            if peer is None:
                return (device, port), hops
            upstream = sorted(p for d, p in storming if d == peer[0] and (d, p) not in visited)
            if not upstream:
                return peer, hops
            device, port, hops = peer[0], upstream[0], hops + 1
            visited.add((device, port))
