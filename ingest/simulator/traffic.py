"""Training-job traffic: which NIC sends how much to which, on which QPs, when.

An activity (a collective of one job over a time window, optionally bursty) becomes a static set of
flows routed once at setup: traffic matrices of collectives do not change while they run, so the
per-tick cost is only deciding which activities are on. QPs of one connection that hash onto the
same path are merged into one flow (weight = demand, ``qps`` = how many QPs it stands for).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from fabricwatch.ingest.simulator.fabric import Fabric
from fabricwatch.ingest.simulator.fault_kinds import HostSelection
from fabricwatch.ingest.simulator.scenario import Calls, Scenario
from fabricwatch.schemas.messages import Phase

NS = 1_000_000_000


@dataclass(frozen=True)
class Flows:
    src: np.ndarray  # NIC index
    dst: np.ndarray
    paths: np.ndarray  # (F, 4) directed links, -1 padded
    demand: np.ndarray  # offered bytes per second
    qps: np.ndarray  # QPs merged into the flow

    @staticmethod
    def empty() -> Flows:
        z = np.zeros(0, dtype=np.int64)
        return Flows(z, z, np.zeros((0, 4), dtype=np.int64), np.zeros(0), z)

    @staticmethod
    def concat(parts: list[Flows]) -> Flows:
        if not parts:
            return Flows.empty()
        return Flows(*(np.concatenate([getattr(p, f) for p in parts]) for f in Flows.__dataclass_fields__))


@dataclass(frozen=True)
class ActivityRun:
    """One scheduled activity with its flows and its on-windows (seconds from the start)."""

    job: str
    op: str
    flows: Flows
    starts: np.ndarray
    ends: np.ndarray
    phase: Phase | None
    calls: Calls | None = None
    """Its timed calls (``calls.py``), where the scenario asks for them."""
    steps: bool = False
    """Whether its job's records mark each of its bursts as a training step (``steps.py``)."""

    def on_at(self, t: float) -> bool:
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        return i >= 0 and t < self.ends[i]

    def edges(self) -> np.ndarray:
        return np.concatenate([self.starts, self.ends])


def windows(
    begin: float, end: float, burst: tuple[float, float] | None, horizon: float
) -> tuple[np.ndarray, np.ndarray]:
    """On-windows of an activity clipped to the run: one window, or a burst train."""
    end = min(end, horizon)
    if begin >= end:
        return np.zeros(0), np.zeros(0)
    if burst is None:
        return np.array([begin]), np.array([end])
    on, period = burst
    starts = begin + period * np.arange(int(np.ceil((end - begin) / period)))
    starts = starts[starts < end]
    return starts, np.minimum(starts + on, end)


def select_hosts(
    fabric: Fabric,
    sel: HostSelection,
    placement: str = "spread",
    first: int = 0,
    exclude: tuple[str, ...] = (),
) -> list[str]:
    """Hosts named explicitly, or ``sel`` hosts placed consecutively or round-robin over leaves."""
    if isinstance(sel, list):
        return list(sel)
    n_hosts, per_leaf, n_leaves = len(fabric.hosts), fabric.spec.hosts_per_leaf, fabric.spec.leaves
    if placement == "consecutive":
        order = [(first + i) % n_hosts for i in range(n_hosts)]
    else:
        spread = [leaf * per_leaf + r for r in range(per_leaf) for leaf in range(n_leaves)]
        at = spread.index(first)
        order = spread[at:] + spread[:at]
    chosen = [fabric.hosts[h] for h in order if fabric.hosts[h] not in exclude]
    return chosen[:sel]


def comm_id(job: str, tag: str) -> str:
    """A stable communicator id, as NCCL would print it, derived from the job and activity."""
    return "0x" + hashlib.blake2b(f"{job}/{tag}".encode(), digest_size=6).hexdigest()


def host_pairs(
    op: str, hosts: list[str], root: str | None = None, stages: int = 2
) -> list[tuple[str, str, float]]:
    """(sender, receiver, share of the sender's load) of a collective's point-to-point transfers."""
    n = len(hosts)
    if op in ("AllReduce", "ReduceScatter", "AllGather"):
        return [(hosts[i], hosts[(i + 1) % n], 1.0) for i in range(n)]
    if op == "AllToAll":
        return [(a, b, 1.0 / (n - 1)) for a in hosts for b in hosts if a != b]
    if op == "Reduce":
        return [(h, root, 1.0) for h in hosts if h != root]  # type: ignore[misc]
    if op == "SendRecv":
        groups = np.array_split(np.array(hosts), stages)
        pairs = []
        for s in range(stages - 1):
            for a, b in zip(groups[s], groups[s + 1], strict=False):
                pairs += [(str(a), str(b), 1.0), (str(b), str(a), 1.0)]
        return pairs
    return []


def build_flows(
    fabric: Fabric,
    pairs: list[tuple[str, str, float]],
    load: float,
    qps: int,
    allowed: np.ndarray | None = None,
) -> Flows:
    """Route every QP of every connection (NIC k of one host to NIC k of the other, as NCCL rails do)."""
    if not pairs:
        return Flows.empty()
    per = fabric.spec.nics_per_host
    index = {h: i for i, h in enumerate(fabric.hosts)}
    a = np.array([index[p[0]] for p in pairs], dtype=np.int64)
    b = np.array([index[p[1]] for p in pairs], dtype=np.int64)
    share = np.array([p[2] for p in pairs])
    k = np.arange(per)
    src = (a[:, None] * per + k).ravel()
    dst = (b[:, None] * per + k).ravel()
    rate = np.repeat(share, per) * load * fabric.spec.link_gbps * 1e9 / 8
    src_q, dst_q = np.repeat(src, qps), np.repeat(dst, qps)
    qp = np.tile(np.arange(qps), len(src))
    paths = fabric.route(src_q, dst_q, qp, allowed)
    keys, inverse = np.unique(np.column_stack([src_q, dst_q, paths]), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    return Flows(
        src=keys[:, 0],
        dst=keys[:, 1],
        paths=keys[:, 2:],
        demand=np.bincount(inverse, weights=np.repeat(rate / qps, qps), minlength=len(keys)),
        qps=np.bincount(inverse, minlength=len(keys)),
    )


def make_activity(
    sc: Scenario,
    job: str,
    tag: str,
    op: str,
    hosts: list[str],
    flows: Flows,
    begin: float,
    end: float,
    burst: tuple[float, float] | None = None,
    root: str | None = None,
    calls: Calls | None = None,
    steps: bool = False,
) -> ActivityRun:
    """An activity and its Phase (none for idle time: NCCL logs nothing when nothing runs)."""
    starts, ends = windows(begin, end, burst, sc.duration)
    phase = None
    if op != "idle" and len(starts):
        t0 = sc.start_ns
        phase = Phase(
            job=job,
            comm=comm_id(job, tag),
            op=op,  # type: ignore[arg-type]
            begin_ns=t0 + round(starts[0] * NS),
            end_ns=t0 + round(ends[-1] * NS),
            bytes=round(float(flows.demand.sum() * (ends - starts).sum())),
            hosts=hosts,
            root_rank=hosts.index(root) if root is not None else None,
            source="sim",
        )
    return ActivityRun(job, op, flows, starts, ends, phase, calls, steps)


def job_activities(sc: Scenario, fabric: Fabric) -> list[ActivityRun]:
    """The scheduled activities of every job in the scenario."""
    runs = []
    for job in sc.jobs:
        job_hosts = select_hosts(fabric, job.hosts, job.placement, job.first_host)
        for a, act in enumerate(job.schedule):
            hosts = job_hosts if act.root in (None, *job_hosts) else [*job_hosts, act.root]
            pairs = host_pairs(act.op, hosts, act.root, act.stages)
            flows = build_flows(fabric, pairs, act.load, job.qps_per_connection)
            burst = (act.burst.duration, act.burst.period) if act.burst else None
            tag = act.calls.comm if act.calls and act.calls.comm else str(a)
            runs.append(
                make_activity(
                    sc,
                    job.name,
                    tag,
                    act.op,
                    hosts,
                    flows,
                    act.begin,
                    act.end,
                    burst,
                    act.root,
                    act.calls,
                    act.steps,
                )
            )
    return runs
