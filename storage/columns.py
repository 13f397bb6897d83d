"""Messages as the columns of their ClickHouse tables: pure conversions, no I/O."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np

from fabricwatch.schemas.bandwidth import bandwidths, size_bucket
from fabricwatch.schemas.messages import (
    Anomaly,
    BurstProfile,
    Collectives,
    CommGraph,
    Periods,
    Phase,
    Steps,
    Topology,
)


def anomaly_columns(new: list[Anomaly]) -> dict:
    """The ``anomaly_events`` columns of anomaly lifecycle events."""
    return {
        "fingerprint": [a.fingerprint for a in new],
        "kind": [a.kind for a in new],
        "severity": [a.severity for a in new],
        "status": [a.status for a in new],
        "start": utc_times([a.start_ns for a in new]),
        "ts": utc_times([a.ts_ns for a in new]),
        "end": utc_times([a.end_ns for a in new]),
        "start_ns": np.array([a.start_ns for a in new], dtype=np.uint64),
        "ts_ns": np.array([a.ts_ns for a in new], dtype=np.uint64),
        "end_ns": [a.end_ns for a in new],
        "root_device": [a.root.device for a in new],
        "root_port": [a.root.port for a in new],
        "root_priority": [a.root.priority for a in new],
        "root_group": [a.root.group for a in new],
        "summary": [a.summary for a in new],
        "hint": [a.hint for a in new],
        "devices": [list(a.devices) for a in new],
        "hosts": [list(a.hosts) for a in new],
        "jobs": [list(a.jobs) for a in new],
        "collectives": [list(a.collectives) for a in new],
        "evidence": [json.dumps(a.evidence, sort_keys=True) for a in new],
        "caused_by": [a.caused_by for a in new],
    }


def phase_columns(new: list[Phase]) -> dict:
    """The ``phases`` columns of collective phases."""
    return {
        "job": [p.job for p in new],
        "comm": [p.comm for p in new],
        "op": [p.op for p in new],
        "begin": utc_times([p.begin_ns for p in new]),
        "end": utc_times([p.end_ns for p in new]),
        "begin_ns": np.array([p.begin_ns for p in new], dtype=np.uint64),
        "end_ns": np.array([p.end_ns or 0 for p in new], dtype=np.uint64),
        "bytes": np.array([p.bytes for p in new], dtype=np.uint64),
        "hosts": [p.participants() for p in new],
        "root_rank": [p.root_rank for p in new],
        "source": [p.source for p in new],
    }


def call_columns(batches: list[Collectives]) -> dict:
    """The ``collective_calls`` columns: one row per timed call, its bandwidths computed here in
    one vectorised pass over every call of the flush. A call entered and not completed has no time
    to store."""
    rows = [(b, c) for b in batches for c in b.calls if c.completed]
    ops = np.array([c.op for _, c in rows])
    nbytes = np.array([c.bytes for _, c in rows], dtype=np.int64)
    nranks = np.array([b.nranks for b, _ in rows], dtype=np.int64)
    dur = np.array([c.dur_ns for _, c in rows], dtype=np.int64)
    algbw, busbw = bandwidths(ops, nbytes, nranks, dur)
    begins = [c.begin_ns for _, c in rows]
    return {
        "job": [b.job for b, _ in rows],
        "comm": [b.comm for b, _ in rows],
        "op": ops.tolist(),
        "rank": np.array([c.rank for _, c in rows], dtype=np.uint32),
        "host": [b.rank_hosts.get(c.rank, "") for b, c in rows],
        "begin": utc_times(begins),
        "begin_ns": np.array(begins, dtype=np.uint64),
        "dur_ns": dur.astype(np.uint64),
        "bytes": nbytes.astype(np.uint64),
        "size_bucket": size_bucket(nbytes).astype(np.uint64),
        "nranks": nranks.astype(np.uint32),
        "algbw": algbw,
        "busbw": busbw,
        "source": [b.source for b, _ in rows],
        "upper_bound": np.array([b.upper_bound for b, _ in rows], dtype=np.uint8),
    }


def step_columns(batches: list[Steps]) -> dict:
    """The ``job_steps`` columns: one row per step of one rank."""
    rows = [(b, s) for b in batches for s in b.steps]
    begins = [s.begin_ns for _, s in rows]
    return {
        "job": [b.job for b, _ in rows],
        "step": np.array([s.step for _, s in rows], dtype=np.uint64),
        "rank": np.array([s.rank for _, s in rows], dtype=np.uint32),
        "host": [b.rank_hosts.get(s.rank, "") for b, s in rows],
        "begin": utc_times(begins),
        "begin_ns": np.array(begins, dtype=np.uint64),
        "dur_ns": np.array([s.dur_ns for _, s in rows], dtype=np.uint64),
        "coll_ns": [s.coll_ns for _, s in rows],
        "exposed_ns": [s.exposed_ns for _, s in rows],
        "source": [b.source for b, _ in rows],
    }


def period_columns(batches: list[Periods]) -> dict:
    """The ``nic_periods`` columns: one row per NIC judged."""
    ts = [t for b in batches for t in b.ts_ns]
    return {
        "ts": utc_times(ts),
        "ts_ns": np.array(ts, dtype=np.uint64),
        "device": [d for b in batches for d in b.devices],
        "period_s": np.array([x for b in batches for x in b.period_s], dtype=np.float32),
        "strength": np.array([x for b in batches for x in b.strength], dtype=np.float32),
        "usual_s": np.array([_nan(x) for b in batches for x in b.usual_s], dtype=np.float32),
        "rate_Bps": np.array([_nan(x) for b in batches for x in b.rate_Bps], dtype=np.float64),
    }


def profile_columns(profiles: list[BurstProfile]) -> dict:
    """The ``burst_profiles`` columns: one row per capture."""
    starts = [p.start_ns for p in profiles]
    out: dict = {
        "ts": utc_times(starts),
        "start_ns": np.array(starts, dtype=np.uint64),
        **{k: [getattr(p, k) for p in profiles] for k in ("host", "netdev", "trigger")},
        **{
            k: np.array([getattr(p, k) for p in profiles], dtype=np.float64)
            for k in ("seconds", "period_s", "achieved_period_s", "bin_s", "line_Bps")
        },
        "samples": np.array([p.samples for p in profiles], dtype=np.uint32),
        "unread": np.array([p.unread for p in profiles], dtype=np.uint32),
        "rx_packets": np.array([p.rx_packets for p in profiles], dtype=np.uint64),
        "tx_packets": np.array([p.tx_packets for p in profiles], dtype=np.uint64),
        "ecn_marked_packets": [p.ecn_marked_packets for p in profiles],
        "cnp_sent": [p.cnp_sent for p in profiles],
        "ecn_per_bin_pps": [p.ecn_per_bin_pps for p in profiles],
        "ecn_refresh_s": [p.ecn_refresh_s for p in profiles],
    }
    for side in ("rx", "tx"):
        d = [getattr(p, side) for p in profiles]
        for k in ("peak_Bps", "p99_Bps", "mean_Bps", "hot_s", "longest_burst_s"):
            out[f"{side}_{k}"] = np.array([getattr(x, k) for x in d], dtype=np.float64)
        out[f"{side}_bursts"] = np.array([x.bursts for x in d], dtype=np.uint32)
        out[f"{side}_per_bin_Bps"] = [x.per_bin_Bps for x in d]
    return out


def _nan(x: float | None) -> float:
    return np.nan if x is None else x


def edge_columns(graphs: list[CommGraph]) -> dict:
    """The ``comm_edges`` columns: one row per connection each host reported."""
    rows = [(g, e) for g in graphs for e in g.edges]
    return {
        "job": [g.job for g, _ in rows],
        "comm": [g.comm for g, _ in rows],
        "host": [g.host for g, _ in rows],
        "ts_ns": np.array([g.ts_ns for g, _ in rows], dtype=np.uint64),
        "src_rank": np.array([e.src for _, e in rows], dtype=np.uint32),
        "dst_rank": np.array([e.dst for _, e in rows], dtype=np.uint32),
        "channel": np.array([e.channel for _, e in rows], dtype=np.uint16),
        "conn": np.array([e.conn for _, e in rows], dtype=np.uint16),
        "side": [e.side for _, e in rows],
        "transport": [e.transport for _, e in rows],
        "nic": [e.nic for _, e in rows],
    }


def rank_columns(ranks: list[tuple[str, str, int, str, int]]) -> dict:
    """The ``comm_ranks`` columns of (job, comm, rank, host, ts_ns) rows."""
    return {
        "job": [r[0] for r in ranks],
        "comm": [r[1] for r in ranks],
        "rank": np.array([r[2] for r in ranks], dtype=np.uint32),
        "host": [r[3] for r in ranks],
        "ts_ns": np.array([r[4] for r in ranks], dtype=np.uint64),
    }


def topology_columns(topo: Topology) -> dict[str, dict[str, list]]:
    """The columns of each topology table for one snapshot (without its time columns)."""
    return {
        "topology_links": {
            "a_device": [x.a_device for x in topo.links],
            "a_port": [x.a_port for x in topo.links],
            "b_device": [x.b_device for x in topo.links],
            "b_port": [x.b_port for x in topo.links],
            "speed_gbps": [float(x.speed_gbps) for x in topo.links],
        },
        "topology_ecmp": {
            "group_id": [g.id for g in topo.ecmp_groups for _ in g.members],
            "device": [g.device for g in topo.ecmp_groups for _ in g.members],
            "member": [m for g in topo.ecmp_groups for m in g.members],
            "toward": [g.toward for g in topo.ecmp_groups for _ in g.members],
        },
        "topology_nics": {
            "host": [n.host for n in topo.nics],
            "nic": [n.nic for n in topo.nics],
            "nic_port": [n.nic_port for n in topo.nics],
            "leaf": [n.leaf for n in topo.nics],
            "leaf_port": [n.leaf_port for n in topo.nics],
        },
        "topology_devices": {
            "id": [d.id for d in topo.devices],
            "kind": [d.kind for d in topo.devices],
            "pod": [d.pod for d in topo.devices],
            "host": [d.host for d in topo.devices],
        },
    }


class Interner:
    """Codes for repeated names (devices, ports), kept across batches; a port list is looked up
    once per distinct list, not once per port."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._code: dict[str, int] = {}
        self._lists: dict[tuple[str, ...], np.ndarray] = {}

    def code(self, name: str) -> int:
        found = self._code.get(name)
        if found is None:
            found = self._code[name] = len(self.values)
            self.values.append(name)
        return found

    def codes(self, names: list[str]) -> np.ndarray:
        return np.fromiter((self.code(n) for n in names), dtype=np.int32, count=len(names))

    def codes_of_list(self, names: list[str]) -> np.ndarray:
        key = tuple(names)
        found = self._lists.get(key)
        if found is None:
            found = self._lists[key] = self.codes(names)
        return found


def utc_times(ns: list[int | None]) -> list[datetime | None]:
    """Nanoseconds → UTC datetimes (millisecond precision is what the columns keep)."""
    return [None if t is None else datetime.fromtimestamp(t // 1_000_000 / 1000, UTC) for t in ns]
