"""A node's collective calls (``nccl_log``) coalesced into phases: one message per run of one
collective on one communicator, not one per call.

A training job makes thousands of collective calls per second per rank; stage 2 needs to know
which collective of which job ran on which hosts when, which a run of calls tells as well as each
call would. Calls of one collective on one communicator (the job-wide ``commId`` from the INIT
line, so every rank of the node lands in the same phase) belong to one phase until none comes for
``gap_s``, or the phase has lasted ``max_s`` (a job that never pauses still reports every
``max_s``). Collectives of one communicator may overlap (a node's ranks are read one file after
another, and streams overlap), so each has its own phase. A phase is sent when it closes, with
its first and last call's times, its hosts and ranks, and its bytes (the most one process handed
to NCCL over the phase: every rank of an AllReduce passes the same buffer).

A call's time is its line's own timestamp when NCCL printed one, else the time it was read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricwatch.ingest.phases.nccl_log import CollCall, CommInit
from fabricwatch.schemas.messages import Phase

ROOTED = {"Broadcast", "Reduce"}


@dataclass
class _Open:
    op: str
    begin_ns: int
    last_ns: int
    root: int | None
    rank_hosts: dict[int, str] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)
    bytes_by_process: dict[tuple[str, int], int] = field(default_factory=dict)
    calls: int = 0
    step: int | None = None


@dataclass
class CoalescerStats:
    calls: int = 0
    phases: int = 0


class PhaseCoalescer:
    """Feed ``init`` and ``call``; ``call`` and ``due`` return the phases that closed."""

    def __init__(self, job: str, gap_s: float = 0.5, source: str = "nccl-log", max_s: float = 1.0) -> None:
        if not job:
            raise ValueError("a phase needs a job name")
        self.job = job
        self.source = source
        self.stats = CoalescerStats()
        self._gap_ns = int(gap_s * 1e9)
        self._max_ns = int(max_s * 1e9)
        self.comms: dict[tuple[str, int, str], CommInit] = {}
        """Each process's ``comm`` pointer, by (host, pid, pointer): the communicator it is a rank of."""
        self._open: dict[tuple[str, str], _Open] = {}
        self.step: int | None = None
        """The training step the job said it is in (``fabricwatch.phases.step``): a phase that
        begins now carries it."""

    def init(self, info: CommInit) -> None:
        """A process's ``comm`` pointer is rank ``info.rank`` of communicator ``info.comm_id``."""
        self.comms[(info.host, info.pid, info.comm)] = info

    def call(self, c: CollCall, read_ns: int) -> list[Phase]:
        return self._add(c, c.ts_ns if c.ts_ns is not None else read_ns, c.bytes, c.n)

    def calls(self, batch: list[CollCall], read_ns: int) -> list[Phase]:
        """``call`` for each, in order; consecutive untimed calls of one process, communicator and
        collective (one time: when they were read) are one update."""
        closed: list[Phase] = []
        i, n = 0, len(batch)
        while i < n:
            c = batch[i]
            j, total, count = i + 1, c.bytes, c.n
            if c.ts_ns is None:
                who = c[:4]  # host, pid, comm, op
                while j < n and batch[j].ts_ns is None and batch[j][:4] == who:
                    total += batch[j].bytes
                    count += batch[j].n
                    j += 1
            closed += self._add(c, c.ts_ns if c.ts_ns is not None else read_ns, total, count)
            i = j
        return closed

    def _add(self, c: CollCall, ts: int, nbytes: int, count: int) -> list[Phase]:
        self.stats.calls += count
        init = self.comms.get((c.host, c.pid, c.comm))
        comm_id, rank = (init.comm_id, init.rank) if init else (f"{c.host}:{c.pid}:{c.comm}", None)
        key = (comm_id, c.op)
        closed = []
        current = self._open.get(key)
        if current is not None and (
            ts - current.last_ns > self._gap_ns or ts - current.begin_ns >= self._max_ns
        ):
            closed.append(self._close(key))
            current = None
        if current is None:
            root = c.root if c.op in ROOTED else None
            current = self._open[key] = _Open(c.op, ts, ts, root, step=self.step)
        current.begin_ns = min(current.begin_ns, ts)
        current.last_ns = max(current.last_ns, ts + c.dur_ns)
        current.calls += count
        current.hosts.add(c.host)
        if rank is not None:
            current.rank_hosts[rank] = c.host
        process = (c.host, c.pid)
        current.bytes_by_process[process] = current.bytes_by_process.get(process, 0) + nbytes
        return closed

    def running(self) -> set[str]:
        """The communicators with a phase open."""
        return {comm for comm, _ in self._open}

    def due(self, now_ns: int) -> list[Phase]:
        """Phases whose last call is more than ``gap_s`` before ``now_ns``."""
        idle = [key for key, p in self._open.items() if now_ns - p.last_ns > self._gap_ns]
        return [self._close(key) for key in idle]

    def close_all(self) -> list[Phase]:
        return [self._close(key) for key in list(self._open)]

    def _close(self, key: tuple[str, str]) -> Phase:
        p = self._open.pop(key)
        self.stats.phases += 1
        return Phase(
            job=self.job,
            comm=key[0],
            op=p.op,  # type: ignore[arg-type]
            begin_ns=p.begin_ns,
            end_ns=p.last_ns,
            bytes=max(p.bytes_by_process.values()),
            hosts=sorted(p.hosts),
            rank_hosts=dict(sorted(p.rank_hosts.items())),
            root_rank=p.root,
            source=self.source,
            step=p.step,
        )
