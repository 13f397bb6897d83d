"""The topology as lookups the detectors need: link peers, port speeds, ECMP groups, NIC owners."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fabricwatch.schemas.messages import EcmpGroup, QueueProfile, Topology


class EcnCurve(NamedTuple):
    """WRED marking thresholds per (port, queue): bytes of queue where marking starts and where it
    reaches ``pmax``, the share marked there."""

    kmin: np.ndarray
    kmax: np.ndarray
    pmax: np.ndarray


def _curve(profiles: list[QueueProfile], ports: list[str], queues: np.ndarray) -> EcnCurve:
    shape = (len(ports), len(queues))
    curve = EcnCurve(np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan))
    rank = np.full(shape, -1)
    for profile in profiles:
        rows = np.array([p == profile.port for p in ports]) if profile.port else np.ones(len(ports), bool)
        cols = queues == profile.queue if profile.queue is not None else np.ones(len(queues), bool)
        specific = 2 * bool(profile.port) + (profile.queue is not None)
        wins = rows[:, None] & cols[None, :] & (rank < specific)
        pmax = np.nan if profile.ecn_pmax is None else profile.ecn_pmax
        curve.kmin[wins], curve.kmax[wins], curve.pmax[wins] = (
            profile.ecn_kmin_bytes,
            profile.ecn_kmax_bytes,
            pmax,
        )
        rank[wins] = specific
    return curve


class FabricMap:
    """Read-only view of one Topology message; rebuilt whenever a new one arrives."""

    def __init__(self, topology: Topology | None, default_gbps: float = 400.0) -> None:
        self.default_bps = default_gbps * 1e9
        self._peer: dict[tuple[str, str], tuple[str, str]] = {}
        self._speed: dict[tuple[str, str], float] = {}
        self._groups: dict[str, list[EcmpGroup]] = {}
        self._host_of: dict[str, str] = {}
        self._leaf_port_host: dict[tuple[str, str], str] = {}
        self._nic_at: dict[tuple[str, str], str] = {}
        self._speed_cache: dict[tuple[str, tuple[str, ...]], tuple[np.ndarray, np.ndarray]] = {}
        self._edge_cache: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}
        self._known: set[str] = set()
        self._nics: set[str] = set()
        self._neighbours: dict[str, set[str]] = {}
        self._profiles: dict[str, list[QueueProfile]] = {}
        self._curve_cache: dict[tuple[str, tuple[str, ...], tuple[int, ...]], EcnCurve | None] = {}
        if topology is not None:
            self._index(topology)

    def _index(self, topo: Topology) -> None:
        for link in topo.links:
            a, b = (link.a_device, link.a_port), (link.b_device, link.b_port)
            self._peer[a], self._peer[b] = b, a
            self._speed[a] = self._speed[b] = link.speed_gbps * 1e9
            self._neighbours.setdefault(a[0], set()).add(b[0])
            self._neighbours.setdefault(b[0], set()).add(a[0])
        for group in topo.ecmp_groups:
            self._groups.setdefault(group.device, []).append(group)
        self._known = {d.id for d in topo.devices}
        self._nics = {d.id for d in topo.devices if d.kind == "nic"} | {a.nic for a in topo.nics}
        for profile in topo.queue_profiles:
            self._profiles.setdefault(profile.device, []).append(profile)
        for dev in topo.devices:
            if dev.host:
                self._host_of[dev.id] = dev.host
        for att in topo.nics:
            self._host_of[att.nic] = att.host
            self._leaf_port_host[(att.leaf, att.leaf_port)] = att.host
            self._nic_at[(att.leaf, att.leaf_port)] = att.nic
            leaf_speed = self._speed.get((att.leaf, att.leaf_port))
            if leaf_speed is not None:  # a NIC port runs at the speed of the leaf port it is cabled to
                self._speed.setdefault((att.nic, att.nic_port), leaf_speed)

    def peer(self, device: str, port: str) -> tuple[str, str] | None:
        return self._peer.get((device, port))

    def port_speeds_bps(self, device: str, ports: list[str]) -> np.ndarray:
        """Line rate of each port in bytes per second (the unit of the byte counters)."""
        return self.speeds(device, ports)[0]

    def speeds(self, device: str, ports: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each port's line rate in bytes per second, twice: with the default speed where the
        topology does not give one (for utilisation), and with NaN there (for judging what a
        counter could have done: an assumed speed is no evidence). One lookup for both, since
        stage 1 needs both for every snapshot."""
        key = (device, tuple(ports))
        found = self._speed_cache.get(key)
        if found is None:
            known = np.array([self._speed.get((device, p), np.nan) for p in ports], dtype=np.float64) / 8.0
            found = self._speed_cache[key] = (np.where(np.isnan(known), self.default_bps / 8.0, known), known)
        return found

    def host_facing(self, device: str, ports: list[str]) -> np.ndarray:
        """Which ports have a NIC behind them; all of them when the topology does not know this
        device (no topology yet, or a device it does not list), so nothing is ruled out blind."""
        key = (device, tuple(ports))
        mask = self._edge_cache.get(key)
        if mask is None:
            if device in self._known:
                mask = np.array([(device, p) in self._nic_at for p in ports], dtype=bool)
            else:
                mask = np.ones(len(ports), dtype=bool)
            self._edge_cache[key] = mask
        return mask

    def ecn_curve(self, device: str, ports: list[str], queues: np.ndarray) -> EcnCurve | None:
        """The ECN marking curve of each (port, queue) as the topology gives it (a site file, or
        the switch's own configuration), NaN where it gives none; None for a device it gives
        nothing for. The most specific profile wins: port and queue, then port, then device."""
        key = (device, tuple(ports), tuple(int(q) for q in queues))
        if key in self._curve_cache:
            return self._curve_cache[key]
        profiles = self._profiles.get(device)
        curve = _curve(profiles, ports, np.asarray(queues)) if profiles else None
        self._curve_cache[key] = curve
        return curve

    def ecmp_groups(self, device: str) -> list[EcmpGroup]:
        return self._groups.get(device, [])

    def neighbours(self, device: str) -> set[str]:
        """Devices one link away."""
        return self._neighbours.get(device, set())

    def lacks(self, device: str) -> bool:
        """Whether a topology is known and this device is not in it (as a device, a NIC attachment
        or a link end): what is said about it then is not checked against the fabric."""
        known = self._known or self._nics or self._neighbours
        return (
            bool(known)
            and device not in self._known
            and device not in self._nics
            and device not in self._neighbours
        )

    def is_nic(self, device: str) -> bool:
        return device in self._nics

    def host_of(self, device: str) -> str:
        """The host a NIC belongs to, or the device itself."""
        return self._host_of.get(device, device)

    def host_behind(self, device: str, port: str) -> str | None:
        """The host whose NIC is cabled to this switch port, if any."""
        return self._leaf_port_host.get((device, port))

    def nic_behind(self, device: str, port: str) -> str | None:
        return self._nic_at.get((device, port))

    def hosts_under(self, leaf: str) -> set[str]:
        return {h for (dev, _), h in self._leaf_port_host.items() if dev == leaf}
