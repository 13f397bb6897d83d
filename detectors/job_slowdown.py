"""A job's collective or step slower than its own recent past (kind ``job_slowdown``).

Per communicator, collective and size bucket, each call's bus bandwidth over the time its median
rank spent in it (``job_calls.busbw``); per job, its steps per second (the median rank's step time,
``job_steps``), so that a step 25 % longer is the same 20 % drop. The baseline is the median of the
``baseline_calls`` calls before the last ``recent_calls``, taken while the job was not slow (a
slowdown never becomes the new normal while it lasts); the job is slow while the median of its last
``recent_calls`` is ``drop`` (20 %) or more below the baseline, ``persist_calls`` calls in a row,
and well again when it is back within half that. A job changing its message size changes bucket, not
speed; a single call stretched by a checkpoint pause moves no median.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.job_calls import CommCalls, Occurrence, busbw
from fabricwatch.detectors.job_steps import JobSteps, StepTime
from fabricwatch.detectors.spec import Detector, IncidentKind, JobFinding, by_the_job_stage
from fabricwatch.schemas.bandwidth import bucket_name, size_bucket
from fabricwatch.schemas.config import AtLeastOne, Fraction
from fabricwatch.schemas.messages import RootCause

UNSEEN_NS = 60 * 1_000_000_000
"""A collective and size the job has not called for this long is no longer slow: it is gone (the
job changed its sizes, or ended); the incident resolves rather than stay open for ever."""


class SlowdownConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    drop: Fraction = 0.2
    """The share of bus bandwidth lost against the baseline that is a slowdown."""
    recent_calls: AtLeastOne = 5
    baseline_calls: AtLeastOne = 20
    persist_calls: AtLeastOne = 3


@dataclass
class _Series:
    normal: list[float] = field(default_factory=list)
    """Bus bandwidth of calls judged while the job was not slow: the baseline's pool."""
    recent: list[tuple[int, float]] = field(default_factory=list)
    slow_since: int | None = None
    slow_calls: int = 0
    firing: bool = False
    base: float = float("nan")
    now: float = float("nan")


class Slowdown:
    def __init__(self, config: SlowdownConfig) -> None:
        self.config = config
        self._series: dict[tuple[str, str, str, int], _Series] = {}
        self._seen: dict[tuple[str, str], int] = {}

    def check(self, comm: CommCalls, now_ns: int) -> list[JobFinding]:
        new: list[Occurrence] = self._new((comm.job, comm.comm), comm.done, comm.judged)
        buckets = size_bucket(np.array([o.rank_bytes for o in new], dtype=np.int64)).tolist()
        for occ, bw, bucket in zip(new, busbw(new, comm.nranks).tolist(), buckets, strict=True):
            key = (comm.job, comm.comm, occ.op, bucket)
            self._judge(self._series.setdefault(key, _Series()), occ.begin_ns, bw)
        return [
            self._finding(comm, key, s)
            for key, s in self._series.items()
            if s.firing and key[:2] == (comm.job, comm.comm) and now_ns - s.recent[-1][0] < UNSEEN_NS
        ]

    def check_steps(self, steps: JobSteps, now_ns: int) -> list[JobFinding]:
        """The job's step time, judged as a speed (steps per second) like a call's bandwidth."""
        key = (steps.job, "", "step", 0)
        new: list[StepTime] = self._new((steps.job, ""), steps.done, steps.judged)
        for st in new:
            self._judge(self._series.setdefault(key, _Series()), st.begin_ns, 1e9 / st.dur_ns)
        s = self._series.get(key)
        if s is None or not s.firing or now_ns - s.recent[-1][0] >= UNSEEN_NS:
            return []
        base_ms, now_ms = 1e3 / s.base, 1e3 / s.now
        lost = 1 - s.now / s.base
        return [
            JobFinding(
                kind="job_slowdown",
                job=steps.job,
                comm="",
                key="step",
                start_ns=s.slow_since or 0,
                severity="critical" if lost >= 0.5 else "warning",
                root=RootCause(steps.job, group=f"job:{steps.job}"),
                summary=f"{steps.job} step time {now_ms:.0f} ms, {now_ms / base_ms - 1:.0%} above its "
                f"{base_ms:.0f} ms",
                hint="",
                evidence={"step_ms": round(now_ms, 3), "baseline_step_ms": round(base_ms, 3)},
                hosts=tuple(steps.hosts()),
                collective=f"{steps.job} steps",
            )
        ]

    def _new(self, key: tuple[str, str], done: Any, judged: int) -> list[Any]:
        """What completed since the last check of ``key``."""
        seen = self._seen.get(key, 0)
        self._seen[key] = judged
        fresh = judged - seen
        return list(done)[-fresh:] if fresh > 0 else []

    def _judge(self, s: _Series, begin_ns: int, bw: float) -> None:
        c = self.config
        if np.isnan(bw):
            return
        s.recent.append((begin_ns, bw))
        if len(s.recent) > c.recent_calls:
            _, old = s.recent.pop(0)
            if not s.slow_calls:
                s.normal = [*s.normal, old][-c.baseline_calls :]
        if len(s.normal) < c.baseline_calls // 2 or len(s.recent) < c.recent_calls:
            return
        s.base, s.now = float(np.median(s.normal)), float(np.median([b for _, b in s.recent]))
        if s.now <= (1 - c.drop) * s.base:
            if not s.slow_calls:
                s.slow_since = s.recent[0][0]
            s.slow_calls += 1
            s.firing = s.firing or s.slow_calls >= c.persist_calls
        elif s.now >= (1 - c.drop / 2) * s.base:
            s.slow_calls, s.slow_since, s.firing = 0, None, False

    def _finding(self, comm: CommCalls, key: tuple[str, str, str, int], s: _Series) -> JobFinding:
        job, comm_id, op, bucket = key
        base, now = s.base, s.now
        lost = 1 - now / base
        size = bucket_name(bucket)
        return JobFinding(
            kind="job_slowdown",
            job=job,
            comm=comm_id,
            key=f"{op}|{bucket}",
            start_ns=s.slow_since or 0,
            severity="critical" if lost >= 0.5 else "warning",
            root=RootCause(job, group=f"job:{job}"),
            summary=f"{job} {op} {size}: bus bandwidth {now:.1f} GB/s, {lost:.0%} below its {base:.1f} GB/s",
            hint="",
            evidence={
                "busbw_gbs": round(now, 3),
                "baseline_busbw_gbs": round(base, 3),
                "busbw_lost": round(lost, 3),
            },
            hosts=tuple(comm.hosts()),
            collective=f"{job} {op} {size} comm {comm_id}",
        )


DETECTOR = Detector(
    name="job_slowdown",
    incidents=(
        IncidentKind(
            name="job_slowdown",
            title="Job slowdown",
            colour="tab:olive",
            hint="See the incident named as the cause; else the job's hosts.",
            describe=by_the_job_stage,
        ),
    ),
    job=lambda config: Slowdown(config.job_slowdown),
    config=("job_slowdown", SlowdownConfig),
)
