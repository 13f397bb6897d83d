"""Real leaf-switch counters as a fabricwatch trace: the Zhejiang Lab cluster traces' excerpt in
``fixtures/zhejiang/`` (a 2,000-GPU RoCE cluster, 0.5 s samples, CC-BY 4.0; ``fixtures/SOURCES.md``).

The source gives, per port and sample, the bytes and packets since the previous sample, at about
0.5 s, with gaps (whole seconds without a sample) and ports whose counters the switch refreshes
every second or so (every other sample of a busy port reads zero). A snapshot is built per sample
time of the leaf, the deltas summed into cumulative counters; a port without a row at that time is
unknown there, never zero. The topology is read off the port names: a ``TwoHundredGigE`` port faces
a host NIC (200G), a ``FourHundredGigE`` port an uplink to a spine (400G); a leaf's uplinks that
carry traffic make its ECMP group ``<leaf>/uplinks``.

``collapse`` injects an ECMP collapse into that real background, as a polarised hash would: from
``start_s`` to ``end_s`` every uplink's egress goes to one member, which carries ``utilisation`` of
its line rate; the source's refresh pattern is kept (the hot member reads zero where its port read
zero, and a refreshed sample covers the time since its last refresh).
"""

from __future__ import annotations

import csv
import gzip
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CounterSpec, Label, RootCause, Snapshot
from fabricwatch.schemas.topology import Device, EcmpGroup, Link, NicAttachment, Topology
from fabricwatch.schemas.trace import TraceWriter
from helpers.paths import FIXTURES

EXCERPTS = FIXTURES / "zhejiang"
NS = 1_000_000_000
UPLINK_Bps = 400e9 / 8
COUNTERS = [
    CounterSpec("rx_packets"),
    CounterSpec("rx_bytes"),
    CounterSpec("tx_packets"),
    CounterSpec("tx_bytes"),
]
"""In the source's column order: InPkts, InOctets, OutPkts, OutOctets."""
TX_BYTES = 3


@dataclass(frozen=True)
class Collapse:
    start_s: float
    end_s: float
    utilisation: float
    hot: str = "FourHundredGigE1/0/49"


@dataclass
class Leaf:
    name: str
    times_ms: np.ndarray
    """Every sample time of the leaf, sorted."""
    ports: list[str]
    deltas: np.ndarray
    """samples x ports x 4 deltas as in the source; NaN where the port has no row at that time."""

    @property
    def uplinks(self) -> list[str]:
        return [p for p in self.ports if p.startswith("FourHundredGigE")]

    @property
    def group(self) -> str:
        return f"{self.name}/uplinks"

    def seconds(self) -> np.ndarray:
        return (self.times_ms - self.times_ms[0]) / 1000.0


def load(leaf: str) -> Leaf:
    with gzip.open(EXCERPTS / f"{leaf}.csv.gz", "rt", encoding="utf-8") as f:
        reader = csv.reader(f)
        next(reader)
        rows = [(int(r[0]), r[1], [int(v) for v in r[2:6]]) for r in reader]
    times = np.unique([r[0] for r in rows])
    ports = sorted({r[1] for r in rows}, key=_port_order)
    at = {t: i for i, t in enumerate(times.tolist())}
    col = {p: j for j, p in enumerate(ports)}
    deltas = np.full((len(times), len(ports), 4), np.nan)
    for t, port, values in rows:
        deltas[at[t], col[port]] = values
    return Leaf(leaf, times, ports, deltas)


def _port_order(port: str) -> tuple[int, int, int]:
    """``TwoHundredGigE1/0/10:2`` -> (200, 10, 2): hosts first, then uplinks, by number."""
    speed = 200 if port.startswith("Two") else 400
    number = port.rsplit("/", 1)[1]
    main, _, sub = number.partition(":")
    return speed, int(main), int(sub or 0)


def inject(leaf: Leaf, fault: Collapse) -> Leaf:
    """The leaf with ``fault`` applied to its uplinks' egress (``tx_bytes``, ``tx_packets``)."""
    deltas = leaf.deltas.copy()
    t = leaf.seconds()
    during = (t >= fault.start_s) & (t < fault.end_s)
    ups = [leaf.ports.index(p) for p in leaf.uplinks]
    hot = leaf.ports.index(fault.hot)
    last_refresh = np.full(len(leaf.ports), np.nan)
    for i in range(len(t)):
        row = deltas[i]
        refreshed = (np.nan_to_num(row[:, TX_BYTES]) > 0) | (np.nan_to_num(row[:, 1]) > 0)
        if during[i]:
            for j in ups:
                if j != hot:
                    row[j, 2:] = np.where(np.isnan(row[j, 2:]), np.nan, 0)
            if refreshed[hot] and not np.isnan(last_refresh[hot]):
                bytes_ = fault.utilisation * UPLINK_Bps * (t[i] - last_refresh[hot])
                row[hot, TX_BYTES] = round(bytes_)
                row[hot, 2] = round(bytes_ / 4096)
        last_refresh[refreshed] = t[i]
    return Leaf(leaf.name, leaf.times_ms, leaf.ports, deltas)


def topology(leaf: Leaf, ts_ns: int) -> Topology:
    devices = [Device(leaf.name, "leaf")]
    links, nics = [], []
    for port in leaf.ports:
        if port in leaf.uplinks:
            spine = f"spine-{port.rsplit('/', 1)[1]}"
            devices.append(Device(spine, "spine"))
            links.append(Link(leaf.name, port, spine, f"{leaf.name}-uplink", 400.0))
        else:
            host = f"{leaf.name}-h{port.rsplit('/', 1)[1].replace(':', '-')}"
            nic = f"{host}/ens0"
            devices += [Device(host, "host"), Device(nic, "nic", host=host)]
            links.append(Link(leaf.name, port, nic, "1", 200.0))
            nics.append(NicAttachment(host, nic, "1", leaf.name, port))
    group = EcmpGroup(leaf.group, leaf.name, leaf.uplinks)
    return Topology(ts_ns, devices, links, [group], nics)


def write_trace(leaves: list[Leaf], out: Path, labels: list[Label] = ()) -> Path:
    """One trace of the leaves' snapshots in time order, after their topology and the labels."""
    t0 = min(int(leaf.times_ms[0]) for leaf in leaves) * 1_000_000
    snaps: list[Snapshot] = []
    for leaf in leaves:
        counts = np.nancumsum(leaf.deltas, axis=0).astype(np.uint64) + np.uint64(10**12)
        for i, ms in enumerate(leaf.times_ms.tolist()):
            known = ~np.isnan(leaf.deltas[i, :, 0])
            ports = [p for p, k in zip(leaf.ports, known, strict=True) if k]
            values = counts[i][known].tolist()
            snaps.append(
                Snapshot(leaf.name, "switch", ms * 1_000_000, COUNTERS, ports, values, source="zhejiang")
            )
    snaps.sort(key=lambda s: s.ts_ns)
    merged = _merged_topology([topology(leaf, t0) for leaf in leaves], t0)
    with TraceWriter(out, "zhejiang-lab-cluster-traces", t0) as w:
        w.write_message(topics.TOPOLOGY, "fabric", t0, merged)
        for label in labels:
            w.write_message(topics.LABELS, label.kind, t0, label)
        for s in snaps:
            w.write_message(topics.COUNTERS, s.device, s.ts_ns, s)
    return out


def _merged_topology(parts: list[Topology], ts_ns: int) -> Topology:
    seen: dict[str, Device] = {}
    for part in parts:
        seen.update({d.id: d for d in part.devices})
    joined: defaultdict[str, list] = defaultdict(list)
    for part in parts:
        joined["links"] += part.links
        joined["groups"] += part.ecmp_groups
        joined["nics"] += part.nics
    return Topology(ts_ns, list(seen.values()), joined["links"], joined["groups"], joined["nics"])


def collapse_label(leaf: Leaf, fault: Collapse, severity: str) -> Label:
    t0 = int(leaf.times_ms[0]) * 1_000_000
    return Label(
        "ecmp_collapse",
        t0 + int(fault.start_s * NS),
        t0 + int(fault.end_s * NS),
        RootCause(leaf.name, group=leaf.group),
        severity=severity,
        note=f"all uplink egress on {fault.hot} at {fault.utilisation:.0%} of line rate",
    )
