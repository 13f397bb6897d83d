"""A job's timed calls (``Collectives``) gathered per communicator into occurrences: the ranks'
records of one call (same ``seq``), what the job-health detectors judge.

A record without ``seq`` (a Kineto kernel) is an occurrence of its own rank. An occurrence is
complete once every rank's record is in, or once two later calls of the communicator are (the
Inspector samples: a rank's record may never come). Only complete occurrences are judged, in the
order their calls began; a communicator keeps its last ``KEPT`` of them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from fabricwatch.schemas.bandwidth import bandwidths
from fabricwatch.schemas.messages import Collectives, Timed

KEPT = 512
KEPT_WAITING = 64
"""Calls entered and not completed a communicator remembers (a hang's first is what matters)."""


@dataclass(frozen=True)
class Stuck:
    """A call some ranks entered and did not complete: ``missing`` never entered it."""

    seq: int
    op: str
    entered: list[int]
    missing: list[int]


@dataclass(frozen=True)
class Occurrence:
    """One call of a communicator as its ranks recorded it."""

    seq: int | None
    op: str
    rank_bytes: int
    ranks: np.ndarray
    begins: np.ndarray
    """Each rank's entry, ns."""
    durs: np.ndarray

    @property
    def begin_ns(self) -> int:
        return int(self.begins.min())

    @property
    def end_ns(self) -> int:
        return int((self.begins + self.durs).max())

    @property
    def dur_ns(self) -> float:
        """What the median rank waited in the call: what the job's owner feels."""
        return float(np.median(self.durs))


@dataclass
class CommCalls:
    """One communicator of one job: its ranks' hosts and its recent occurrences."""

    job: str
    comm: str
    nranks: int
    rank_hosts: dict[int, str] = field(default_factory=dict)
    source: str = ""
    upper_bound: bool = False
    done: deque[Occurrence] = field(default_factory=lambda: deque(maxlen=KEPT))
    judged: int = 0
    """Occurrences completed so far (the index of the next one): detectors remember where they are."""
    phase_until_ns: int | None = 0
    """Until when a phase of the communicator says it runs: None while one is open, 0 unknown."""
    phase_begin_ns: int = 0
    """When its latest phase began: a job back from a pause is silent since then, not before."""
    waiting: dict[int, dict[int, Timed]] = field(default_factory=dict)
    """Calls ranks entered and had not completed when their records were written, by seq and
    rank (a Flight Recorder's entries still scheduled or started)."""
    _open: dict[int, list[Timed]] = field(default_factory=dict)

    def add(self, msg: Collectives) -> None:
        self.nranks = max(self.nranks, msg.nranks)
        self.rank_hosts.update(msg.rank_hosts)
        self.source, self.upper_bound = msg.source, msg.upper_bound
        for call in msg.calls:
            if not call.completed:
                if call.seq is not None:
                    self.waiting.setdefault(call.seq, {})[call.rank] = call
            elif call.seq is None:
                self._complete([call])
            else:
                self._open.setdefault(call.seq, []).append(call)
                self.waiting.get(call.seq, {}).pop(call.rank, None)
        while len(self.waiting) > KEPT_WAITING:
            del self.waiting[min(self.waiting)]
        self._close_ready()

    def stuck(self) -> Stuck | None:
        """The oldest call some rank entered and has not completed: who entered it, who did not."""
        seqs = [seq for seq, ranks in self.waiting.items() if ranks]
        if not seqs:
            return None
        seq = min(seqs)
        entered = set(self.waiting[seq]) | {c.rank for c in self._open.get(seq, [])}
        missing = sorted(set(range(self.nranks)) - entered)
        first = next(iter(self.waiting[seq].values()))
        return Stuck(seq, first.op, sorted(entered), missing)

    def _close_ready(self) -> None:
        if not self._open:
            return
        newest = max(self._open)
        for seq in sorted(self._open):
            calls = self._open[seq]
            if len({c.rank for c in calls}) >= self.nranks or seq <= newest - 2:
                self._complete(self._open.pop(seq))

    def _complete(self, calls: list[Timed]) -> None:
        first = calls[0]
        if first.seq is not None:
            self.waiting.pop(first.seq, None)
        self.done.append(
            Occurrence(
                first.seq,
                first.op,
                first.bytes,
                np.array([c.rank for c in calls]),
                np.array([c.begin_ns for c in calls], dtype=np.int64),
                np.array([c.dur_ns for c in calls], dtype=np.float64),
            )
        )
        self.judged += 1

    def on_phase(self, begin_ns: int, end_ns: int | None) -> None:
        self.phase_begin_ns = max(self.phase_begin_ns, begin_ns)
        if end_ns is None or self.phase_until_ns is None:
            self.phase_until_ns = None
        else:
            self.phase_until_ns = max(self.phase_until_ns, end_ns)

    def running(self, now_ns: int) -> bool:
        """Whether a phase says the communicator runs at ``now_ns``, or a rank is inside one of
        its calls (unknown is not running)."""
        in_call = any(self.waiting.values())
        return in_call or self.phase_until_ns is None or self.phase_until_ns >= now_ns

    def hosts(self) -> list[str]:
        return sorted(set(self.rank_hosts.values()))

    def last_end_ns(self) -> int | None:
        return max((o.end_ns for o in self.done), default=None)


def busbw(occurrences: list[Occurrence], nranks: int) -> np.ndarray:
    """Each occurrence's bus bandwidth (GB/s) over the time its median rank spent in it."""
    if not occurrences:
        return np.zeros(0)
    ops = np.array([o.op for o in occurrences])
    nbytes = np.array([o.rank_bytes for o in occurrences])
    durs = np.array([o.dur_ns for o in occurrences])
    return bandwidths(ops, nbytes, np.full(len(occurrences), nranks), durs)[1]
