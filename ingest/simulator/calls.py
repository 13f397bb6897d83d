"""A simulated job's collective calls, each timed as the fabric lets it run: what the NCCL Inspector
would record of them (``Collectives``), for the job-health detectors.

An activity with ``calls`` makes one call after another on its communicator: every rank enters, the
collective runs once the last rank has entered, and the next call begins ``gap`` seconds (the
step's compute) after it ends. At full pace a call moves its bytes at the rate the activity's
flows ask for, plus a latency per ring step, so a large call's bus bandwidth is about that rate
and a small one's lower; the fabric sets the pace, the slowest of the
activity's flows against what it asked (a paused, congested or slowed link stretches the call; a
blocked one stops it). A straggler host enters each call late, so the others wait for it and it
shows the shortest time, as NCCL's records show a late rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fabricwatch.ingest.simulator.fault_kinds import Straggler
from fabricwatch.ingest.simulator.scenario import Scenario
from fabricwatch.ingest.simulator.traffic import ActivityRun
from fabricwatch.schemas.bandwidth import PER_RANK_COUNT, bus_factor
from fabricwatch.schemas.messages import Collectives, Timed

NS = 1_000_000_000
STEP_LATENCY_S = 20e-6
"""What each step of a ring costs beside its bytes (NCCL's ring AllReduce takes 2(n-1) steps,
AllGather and ReduceScatter n-1): small calls reach a lower bus bandwidth than large ones."""


@dataclass(frozen=True)
class Lateness:
    """A host that enters every call ``delay`` seconds late between ``start`` and ``end``."""

    host: str
    delay: float
    start: float
    end: float


@dataclass
class CallTimer:
    """The calls of one activity, advanced segment by segment of the simulation."""

    run: ActivityRun
    comm: str
    rank_bytes: int
    gap: float
    rate_Bps: float
    """What one rank's link carries at full pace (the activity's demand per NIC)."""
    late: list[Lateness] = field(default_factory=list)
    _next: float = 0.0
    _entries: np.ndarray | None = None
    _left: float = 0.0
    _seq: int = 0
    done: list[Timed] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return self.run.phase.hosts if self.run.phase else []

    @property
    def nominal_s(self) -> float:
        """A call's time at full pace: its bus bytes over the rank's rate."""
        n = len(self.hosts)
        array = self.rank_bytes * (n if self.run.op in PER_RANK_COUNT else 1)
        factor = float(bus_factor(np.array([self.run.op]), np.array([n]))[0])
        steps = 2 * (n - 1) if self.run.op == "AllReduce" else n - 1
        return max(factor * array / self.rate_Bps + steps * STEP_LATENCY_S, 1e-6)

    def advance(self, t0: float, t1: float, pace: float, start_ns: int) -> None:
        """Run the calls through the segment ``[t0, t1)`` (seconds) at ``pace`` (0 to 1)."""
        t = t0
        while t < t1:
            if self._entries is None:
                begin = max(t, self._next)
                if begin >= t1 or not self.run.on_at(begin):
                    return
                self._entries = begin + self._delays(begin)
                self._left = self.nominal_s
            running_from = max(t, float(self._entries.max()))
            if running_from >= t1:
                return
            if pace <= 0:
                return
            end = running_from + self._left / pace
            if end > t1:
                self._left -= (t1 - running_from) * pace
                return
            self._finish(end, start_ns)
            t = end

    def _delays(self, begin: float) -> np.ndarray:
        out = np.zeros(len(self.hosts))
        for late in self.late:
            if late.start <= begin < late.end and late.host in self.hosts:
                out[self.hosts.index(late.host)] = late.delay
        return out

    def _finish(self, end: float, start_ns: int) -> None:
        assert self._entries is not None
        op = self.run.op
        for rank, entered in enumerate(self._entries.tolist()):
            begin_ns = start_ns + round(entered * NS)
            dur_ns = max(round((end - entered) * NS), 1)
            self.done.append(Timed(op, rank, self.rank_bytes, begin_ns, dur_ns, self._seq))  # type: ignore[arg-type]
        self._seq += 1
        self._entries = None
        self._next = end + self.gap

    def take(self, job: str) -> list[Collectives]:
        """The calls finished since the last take, as the job's records would deliver them."""
        if not self.done:
            return []
        calls, self.done = self.done, []
        hosts = self.hosts
        return [
            Collectives(
                job=job,
                comm=self.comm,
                nranks=len(hosts),
                ts_ns=min(c.begin_ns for c in calls),
                calls=sorted(calls, key=lambda c: (c.begin_ns, c.rank)),
                rank_hosts=dict(enumerate(hosts)),
                source="sim",
            )
        ]


def pace(flow_rate: np.ndarray, demand: np.ndarray) -> float:
    """How fast an activity's collective runs against full pace: its slowest flow's share of what
    it asked (a ring or tree moves at its slowest link's speed)."""
    asked = demand > 0
    if not asked.any():
        return 1.0
    return float(np.clip((flow_rate[asked] / demand[asked]).min(), 0.0, 1.0))


def call_timers(sc: Scenario, activities: list[ActivityRun]) -> dict[int, CallTimer]:
    """A timer for each activity whose schedule asks for timed calls, by the activity's index."""
    stragglers = [f for f in sc.faults if isinstance(f, Straggler)]
    timers = {}
    for i, run in enumerate(activities):
        if run.calls is None or run.phase is None or not len(run.flows.demand):
            continue
        per_nic = np.bincount(run.flows.src, weights=run.flows.demand)
        late = [
            Lateness(f.host, f.delay, f.start, f.start + f.duration) for f in stragglers if f.job == run.job
        ]
        timers[i] = CallTimer(run, run.phase.comm, run.calls.bytes, run.calls.gap, float(per_nic.max()), late)
    return timers
