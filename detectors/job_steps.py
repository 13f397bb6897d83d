"""A job's training steps (``Steps``) gathered per step number: the ranks' records of one step,
what the job stage judges a job's step time by.

A step is complete once every rank the job has shown has reported it, or once two later steps
have begun (a rank's record may never come). Its time is the median rank's: what the job's owner
feels, one slow rank being a straggler's business, not the step's. A job keeps its last ``KEPT``
steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from fabricwatch.schemas.messages import Step, Steps

KEPT = 512


@dataclass(frozen=True)
class StepTime:
    """One step of a job as its ranks recorded it."""

    step: int
    begin_ns: int
    dur_ns: float
    """The median rank's step time."""


@dataclass
class JobSteps:
    job: str
    rank_hosts: dict[int, str] = field(default_factory=dict)
    done: deque[StepTime] = field(default_factory=lambda: deque(maxlen=KEPT))
    judged: int = 0
    """Steps completed so far (the index of the next one): detectors remember where they are."""
    _ranks: set[int] = field(default_factory=set)
    _open: dict[int, dict[int, Step]] = field(default_factory=dict)

    def add(self, msg: Steps) -> None:
        self.rank_hosts.update(msg.rank_hosts)
        for s in msg.steps:
            self._ranks.add(s.rank)
            self._open.setdefault(s.step, {})[s.rank] = s
        newest = max(self._open, default=0)
        for n in sorted(self._open):
            ranks = self._open[n]
            if len(ranks) >= len(self._ranks) or n <= newest - 2:
                del self._open[n]
                durs = [s.dur_ns for s in ranks.values()]
                self.done.append(StepTime(n, min(s.begin_ns for s in ranks.values()), float(np.median(durs))))
                self.judged += 1

    def hosts(self) -> list[str]:
        return sorted(set(self.rank_hosts.values()))
