"""The job stage as a worker runs it: one owner per job, paced by the fabric's progress.

A job spans pods, and stage 2 runs per pod, so job incidents cannot be stage 2's. Phases and timed
calls are keyed by job on ``fabric.phases``: the worker whose jobs consumer group gives it a job's
partition owns that job (``job_agent``). Its calls must meet the fabric incidents that explain them
in the order they happened, as in process: a call read before stage 2 (another worker, a pod
elsewhere) has judged the same moment would find nothing open and fire alone, or find a storm that
has already resolved. So calls and incidents are held and taken in event-time order up to the
fabric's progress: each stage 2 says, per symptoms partition it owns, how far it has judged
(``fabric.progress``), and the job stage moves to the slowest of them.
"""

from __future__ import annotations

import heapq
from typing import Any

from fabricwatch.detectors.job_stage import CHECK_EVERY_NS, JOB_KINDS, JobStage
from fabricwatch.schemas.messages import Anomaly, Collectives, Phase, PhaseMessage, Steps, Watermark

MAX_STEPS = 600
"""Checks at most between two moments: past the longest wait (a hang's), more change nothing."""


class JobWorker:
    def __init__(
        self,
        config: Any,
        startup_wait_s: float = 5.0,
        stall_after_s: float = 30.0,
        max_held: int = 200_000,
    ) -> None:
        self.core = JobStage(config)
        self.max_held = max_held
        """Past this many held, the oldest are taken whatever the fabric's progress: a fabric no
        stage 2 says anything of (no counters) must not grow the job stage without end."""
        self.startup_wait_s = startup_wait_s
        """How long after the first progress heard the job stage waits for every stage 2's."""
        self.stall_after_s = stall_after_s
        self._progress: dict[str, tuple[int, float]] = {}
        """Per symptoms partition, how far its stage 2 has judged and when that was heard (wall)."""
        self._first_heard: float | None = None
        self._held: list[tuple[int, int, Collectives | Phase | Steps | Anomaly]] = []
        self._seq = 0
        self._now_ns = 0

    @property
    def now_ns(self) -> int:
        """How far the job stage has judged."""
        return self._now_ns

    @property
    def held(self) -> int:
        return len(self._held)

    def on_phase(self, msg: PhaseMessage, ts_ns: int) -> None:
        """A ``fabric.phases`` message of one of our jobs, read at ``ts_ns`` (its record's time)."""
        if isinstance(msg, (Collectives, Phase, Steps)):
            self._hold(ts_ns, msg)

    def on_anomaly(self, anomaly: Anomaly) -> None:
        """A fabric incident's event; job incidents (ours or another worker's) are not causes."""
        if anomaly.kind not in JOB_KINDS:
            self._hold(anomaly.ts_ns, anomaly)

    def on_progress(self, mark: Watermark, wall: float) -> None:
        """How far one symptoms partition's stage 2 has judged, with everything it published
        before already read (``job_agent`` sees to that)."""
        known = self._progress.get(mark.source)
        if self._first_heard is None:
            self._first_heard = wall
        self._progress[mark.source] = (max(mark.ts_ns, known[0] if known else 0), wall)

    def forget(self, jobs: set[str]) -> None:
        """Jobs another worker owns now: their calls and incidents are its to judge. Nothing is
        resolved: the new owner reads the jobs' recent records again and carries them on."""
        self._held = [
            h for h in self._held if not (isinstance(h[2], (Collectives, Phase, Steps)) and h[2].job in jobs)
        ]
        heapq.heapify(self._held)
        self.core.forget(jobs)

    def advance(self, wall: float) -> list[Anomaly]:
        """Take what the fabric's progress has passed, in time order, judging the jobs between."""
        fabric_ns = self._fabric_ns(wall)
        fired: list[Anomaly] = []
        while self._held and (
            (fabric_ns is not None and self._held[0][0] <= fabric_ns) or len(self._held) > self.max_held
        ):
            ts_ns, _, msg = heapq.heappop(self._held)
            fired += self._judge_until(ts_ns)
            if isinstance(msg, Collectives):
                self.core.on_collectives(msg)
            elif isinstance(msg, Steps):
                self.core.on_steps(msg)
            elif isinstance(msg, Phase):
                self.core.on_phase(msg)
            else:
                self.core.on_fabric([msg])
        return fired if fabric_ns is None else fired + self._judge_until(fabric_ns)

    def _fabric_ns(self, wall: float) -> int | None:
        """The slowest symptoms partition's progress, of those heard within ``stall_after_s`` (one
        nobody owns any more holds nothing back); None for ``startup_wait_s`` after the first is
        heard, while the other stage 2s may still be on their way."""
        if self._first_heard is None or wall - self._first_heard < self.startup_wait_s:
            return None
        live = [ts for ts, heard in self._progress.values() if wall - heard < self.stall_after_s]
        return min(live) if live else None

    def _judge_until(self, ts_ns: int) -> list[Anomaly]:
        """The jobs judged every ``CHECK_EVERY_NS`` up to ``ts_ns``, as the in-process ticks do."""
        if ts_ns <= self._now_ns:
            return []
        fired: list[Anomaly] = []
        if self._now_ns:
            last = min(ts_ns, self._now_ns + MAX_STEPS * CHECK_EVERY_NS)
            for t in range(self._now_ns + CHECK_EVERY_NS, last, CHECK_EVERY_NS):
                fired += self.core.evaluate(t)
        fired += self.core.evaluate(ts_ns)
        self._now_ns = ts_ns
        return fired

    def _hold(self, ts_ns: int, msg: Collectives | Phase | Steps | Anomaly) -> None:
        heapq.heappush(self._held, (ts_ns, self._seq, msg))
        self._seq += 1
