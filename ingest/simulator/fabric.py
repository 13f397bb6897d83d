"""The leaf-spine fabric: names, ports, directed links and ECMP routing, as flat numpy index tables.

Every physical link is two *directed* links; a directed link has a transmitting port (whose egress
queue it drains) and a receiving port. The congestion model works on directed links only, and the
counter tables map them back to ports (``port_out`` / ``port_in``), so no code walks devices.

Global port ids: NIC ports first (one per NIC, id = NIC index), then switch ports in device order
(leaves, then spines), host-facing ports before uplinks, named SONiC style ``Ethernet0``,
``Ethernet8``, ...
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.ingest.simulator.scenario import FabricSpec
from fabricwatch.schemas.messages import Device, EcmpGroup, Link, NicAttachment, Topology

POD = "pod0"
NIC_PORT = "1"
PORT_STEP = 8


def host_name(i: int) -> str:
    return f"h{i:03d}"


def nic_name(host: int, k: int) -> str:
    return f"{host_name(host)}/mlx5_{k}"


def port_name(i: int) -> str:
    return f"Ethernet{PORT_STEP * i}"


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-spread, platform-independent stand-in for a switch's CRC hash."""
    x = x.astype(np.uint64) + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class Fabric:
    spec: FabricSpec
    hosts: list[str]
    nics: list[str]
    nic_host: np.ndarray
    nic_leaf: np.ndarray
    leaves: list[str]
    spines: list[str]
    switches: list[str]
    switch_ports: list[list[str]]
    switch_rows: np.ndarray  # first row of each switch in the switch-port table; last entry = total
    link_tx: np.ndarray
    link_rx: np.ndarray
    link_cap: np.ndarray  # bytes per second
    link_switch: np.ndarray  # switch (index into ``switches``) whose egress queue feeds the link; -1: a NIC
    port_out: np.ndarray
    port_in: np.ndarray
    nic_up: np.ndarray
    nic_down: np.ndarray
    uplink: np.ndarray  # (leaves, spines * uplinks_per_spine): leaf -> spine directed links
    downlink: np.ndarray  # (spines, leaves, uplinks_per_spine): spine -> leaf directed links
    leaf_seed: np.ndarray
    spine_seed: np.ndarray

    @property
    def n_nics(self) -> int:
        return len(self.nics)

    @property
    def n_links(self) -> int:
        return len(self.link_tx)

    @property
    def group_size(self) -> int:
        return self.uplink.shape[1]

    def nic_index(self, name: str) -> int:
        """A NIC by id, or a host's first NIC by host name."""
        if "/" not in name:
            name = f"{name}/mlx5_0"
        return self.nics.index(name)

    def host_nics(self, host: str, k: int | None = None) -> list[int]:
        h = self.hosts.index(host)
        per = self.spec.nics_per_host
        return [h * per + k] if k is not None else list(range(h * per, (h + 1) * per))

    def leaf_of_host(self, host: str) -> int:
        return int(self.nic_leaf[self.host_nics(host)[0]])

    def leaf_port_of_nic(self, nic: int) -> str:
        """Name of the leaf port facing a NIC."""
        return self.port_label(int(self.link_rx[self.nic_up[nic]]))[1]

    def port_label(self, port: int) -> tuple[str, str]:
        """(device, port name) of a global port id."""
        if port < self.n_nics:
            return self.nics[port], NIC_PORT
        row = port - self.n_nics
        sw = int(np.searchsorted(self.switch_rows, row, side="right")) - 1
        return self.switches[sw], self.switch_ports[sw][row - int(self.switch_rows[sw])]

    def switch_port_id(self, device: str, port: str) -> int:
        sw = self.switches.index(device)
        return self.n_nics + int(self.switch_rows[sw]) + self.switch_ports[sw].index(port)

    def route(
        self, src: np.ndarray, dst: np.ndarray, qp: np.ndarray, allowed: np.ndarray | None = None
    ) -> np.ndarray:
        """Directed links of each (src NIC, dst NIC, QP index), shape (F, 4), -1 padded.

        The uplink is ``(hash(src, dst, leaf seed) + qp) mod N``: RoCE derives the UDP source port
        from the QP number, and a linear (CRC-like) hash sends consecutive QPs of one connection to
        consecutive members. ``allowed`` (per source leaf, a row of member indexes) models hash
        polarisation: only those members are ever chosen.
        """
        src, dst, qp = (np.asarray(a, dtype=np.int64) for a in (src, dst, qp))
        sl, dl = self.nic_leaf[src], self.nic_leaf[dst]
        h = mix64((src.astype(np.uint64) << np.uint64(32)) ^ dst.astype(np.uint64) ^ self.leaf_seed[sl])
        if allowed is None:
            member = ((h % np.uint64(self.group_size)).astype(np.int64) + qp) % self.group_size
        else:
            k = allowed.shape[1]
            member = allowed[sl, ((h % np.uint64(k)).astype(np.int64) + qp) % k]
        upl = self.spec.uplinks_per_spine
        spine = member // upl
        h2 = mix64(h ^ self.spine_seed[spine])
        parallel = ((h2 % np.uint64(upl)).astype(np.int64) + qp) % upl
        paths = np.full((len(src), 4), -1, dtype=np.int64)
        paths[:, 0] = self.nic_up[src]
        cross = sl != dl
        paths[~cross, 1] = self.nic_down[dst[~cross]]
        paths[cross, 1] = self.uplink[sl[cross], member[cross]]
        paths[cross, 2] = self.downlink[spine[cross], dl[cross], parallel[cross]]
        paths[cross, 3] = self.nic_down[dst[cross]]
        return paths

    def polarised_members(self, leaf: int, k: int) -> np.ndarray:
        """The ``k`` uplinks a polarised hash keeps choosing on ``leaf`` (a fixed, seed-derived pick)."""
        order = np.argsort(mix64(np.arange(self.group_size, dtype=np.uint64) ^ self.leaf_seed[leaf]))
        return np.sort(order[:k])

    def topology(self, ts_ns: int) -> Topology:
        """The Topology message the detectors localise against."""
        devices = [Device(h, "host", pod=POD) for h in self.hosts]
        devices += [
            Device(n, "nic", pod=POD, host=self.hosts[int(self.nic_host[i])]) for i, n in enumerate(self.nics)
        ]
        devices += [Device(name, "leaf", pod=POD) for name in self.leaves]
        devices += [Device(name, "spine", pod=POD) for name in self.spines]
        gbps = self.spec.link_gbps
        links, attachments = [], []
        for i, nic in enumerate(self.nics):
            leaf, port = self.port_label(int(self.link_rx[self.nic_up[i]]))
            links.append(Link(nic, NIC_PORT, leaf, port, gbps))
            attachments.append(NicAttachment(self.hosts[int(self.nic_host[i])], nic, NIC_PORT, leaf, port))
        groups = []
        for li, leaf in enumerate(self.leaves):
            members = []
            for link in self.uplink[li]:
                a_dev, a_port = self.port_label(int(self.link_tx[link]))
                b_dev, b_port = self.port_label(int(self.link_rx[link]))
                links.append(Link(a_dev, a_port, b_dev, b_port, gbps))
                members.append(a_port)
            if len(members) >= 2:
                groups.append(EcmpGroup(f"{leaf}/uplinks", leaf, members, toward="spines"))
        if self.spec.uplinks_per_spine > 1:
            for si, spine in enumerate(self.spines):
                for li, leaf in enumerate(self.leaves):
                    members = [self.port_label(int(self.link_tx[x]))[1] for x in self.downlink[si, li]]
                    groups.append(EcmpGroup(f"{spine}/{leaf}", spine, members, toward=leaf))
        return Topology(ts_ns=ts_ns, devices=devices, links=links, ecmp_groups=groups, nics=attachments)


def build_fabric(spec: FabricSpec) -> Fabric:
    """Lay out devices, ports and directed links for a two-tier leaf-spine fabric."""
    n_leaves, n_spines, upl = spec.leaves, spec.spines, spec.uplinks_per_spine
    per_leaf = spec.hosts_per_leaf * spec.nics_per_host
    n_hosts = n_leaves * spec.hosts_per_leaf
    n_nics = n_hosts * spec.nics_per_host
    hosts = [host_name(h) for h in range(n_hosts)]
    nics = [nic_name(h, k) for h in range(n_hosts) for k in range(spec.nics_per_host)]
    nic_host = np.repeat(np.arange(n_hosts), spec.nics_per_host)
    nic_leaf = nic_host // spec.hosts_per_leaf
    leaves = [f"leaf{i:02d}" for i in range(n_leaves)]
    spines = [f"spine{i:02d}" for i in range(n_spines)]
    group = n_spines * upl
    sizes = [per_leaf + group] * n_leaves + [n_leaves * upl] * n_spines
    switch_rows = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    leaf_port0 = n_nics + switch_rows[:n_leaves]
    spine_port0 = n_nics + switch_rows[n_leaves:-1]

    # Physical links as (port a, port b); directed link 2i is a->b, 2i+1 is b->a.
    nic_ports = np.arange(n_nics)
    leaf_host_ports = leaf_port0[nic_leaf] + np.arange(n_nics) % per_leaf
    li, si, j = np.meshgrid(np.arange(n_leaves), np.arange(n_spines), np.arange(upl), indexing="ij")
    li, si, j = li.ravel(), si.ravel(), j.ravel()
    leaf_up_ports = leaf_port0[li] + per_leaf + si * upl + j
    spine_down_ports = spine_port0[si] + li * upl + j
    a = np.concatenate([nic_ports, leaf_up_ports])
    b = np.concatenate([leaf_host_ports, spine_down_ports])
    link_tx = np.empty(2 * len(a), dtype=np.int64)
    link_rx = np.empty_like(link_tx)
    link_tx[0::2], link_rx[0::2] = a, b
    link_tx[1::2], link_rx[1::2] = b, a
    n_ports = n_nics + int(switch_rows[-1])
    port_out = np.full(n_ports, -1, dtype=np.int64)
    port_in = np.full(n_ports, -1, dtype=np.int64)
    port_out[link_tx] = np.arange(len(link_tx))
    port_in[link_rx] = np.arange(len(link_rx))

    phys_up = n_nics + np.arange(len(li))  # physical link index of each leaf-spine link
    uplink = np.empty((n_leaves, group), dtype=np.int64)
    uplink[li, si * upl + j] = 2 * phys_up
    downlink = np.empty((n_spines, n_leaves, upl), dtype=np.int64)
    downlink[si, li, j] = 2 * phys_up + 1
    row_switch = np.repeat(np.arange(len(sizes)), sizes)
    link_switch = np.where(link_tx >= n_nics, row_switch[np.maximum(link_tx - n_nics, 0)], -1)
    seed = np.uint64(spec.hash_seed)
    return Fabric(
        spec=spec,
        hosts=hosts,
        nics=nics,
        nic_host=nic_host,
        nic_leaf=nic_leaf,
        leaves=leaves,
        spines=spines,
        switches=leaves + spines,
        switch_ports=[[port_name(i) for i in range(n)] for n in sizes],
        switch_rows=switch_rows,
        link_tx=link_tx,
        link_rx=link_rx,
        link_cap=np.full(len(link_tx), spec.link_gbps * 1e9 / 8),
        link_switch=link_switch,
        port_out=port_out,
        port_in=port_in,
        nic_up=2 * np.arange(n_nics),
        nic_down=2 * np.arange(n_nics) + 1,
        uplink=uplink,
        downlink=downlink,
        leaf_seed=mix64(np.arange(n_leaves, dtype=np.uint64) ^ (seed << np.uint64(20))),
        spine_seed=mix64(np.arange(n_spines, dtype=np.uint64) ^ (seed << np.uint64(40)) ^ np.uint64(1)),
    )
