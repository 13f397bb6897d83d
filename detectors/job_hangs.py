"""A communicator of a running job that stopped completing calls (kind ``job_hang``).

A job's calls come at its own pace; one that has completed none for ``factor`` times its usual
gap between calls (and at least ``min_s``) while its phase says it still runs is hung: a rank
never entered, or the collective cannot move (a storm pausing its ports). A job that ended (its
phase closed) or paused between phases is not hung; a rank inside a call is running. Most records
only say what completed; where they say who entered a call (the Flight Recorder's entries still
scheduled or started), the ranks that never entered the call the others wait in are named. The
fabric incident holding it is joined by the job stage.
"""

from __future__ import annotations

import msgspec
import numpy as np

from fabricwatch.detectors.job_calls import CommCalls
from fabricwatch.detectors.spec import Detector, IncidentKind, JobFinding, by_the_job_stage
from fabricwatch.schemas.config import AtLeastOne, Positive
from fabricwatch.schemas.messages import RootCause

NS = 1_000_000_000
HINT = (
    "A rank stopped entering its collectives, or the network holds them: see the fabric incident "
    "named as the cause, else each rank's last call (Flight Recorder)."
)


class HangConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    factor: Positive = 10.0
    min_s: Positive = 3.0
    min_calls: AtLeastOne = 5


class Hangs:
    def __init__(self, config: HangConfig) -> None:
        self.config = config

    def check(self, comm: CommCalls, now_ns: int) -> list[JobFinding]:
        c = self.config
        calls = list(comm.done)
        if len(calls) < c.min_calls or not comm.running(now_ns):
            return []
        begins = np.array([o.begin_ns for o in calls[-50:]], dtype=np.int64)
        period_ns = float(np.median(np.diff(begins))) if len(begins) > 1 else 0.0
        last = max(int(comm.last_end_ns() or 0), comm.phase_begin_ns)
        silent_ns = now_ns - last
        if silent_ns < max(c.factor * period_ns, c.min_s * NS):
            return []
        missing, evidence, hint = _missing(comm)
        return [
            JobFinding(
                kind="job_hang",
                job=comm.job,
                comm=comm.comm,
                key="",
                start_ns=last,
                severity="critical",
                root=RootCause(comm.job, group=f"job:{comm.job}"),
                summary=(
                    f"{comm.job} comm {comm.comm} has completed no {calls[-1].op} for "
                    f"{silent_ns / NS:.1f} s, {silent_ns / max(period_ns, 1):.0f} times its usual gap"
                    + missing
                ),
                hint=hint,
                evidence={
                    "silent_s": round(silent_ns / NS, 3),
                    "usual_gap_s": round(period_ns / NS, 4),
                    **evidence,
                },
                hosts=tuple(comm.hosts()),
                collective=f"{comm.job} {calls[-1].op} comm {comm.comm}",
            )
        ]


def _missing(comm: CommCalls) -> tuple[str, dict[str, str], str]:
    """Who did not enter the call the others wait in, where the records say who entered (the
    Flight Recorder's entries): for the summary, the evidence and the hint."""
    stuck = comm.stuck()
    if stuck is None or not stuck.missing:
        return "", {}, HINT
    hosts = sorted({comm.rank_hosts[r] for r in stuck.missing if r in comm.rank_hosts})
    names, entered = ", ".join(map(str, stuck.missing)), ", ".join(map(str, stuck.entered))
    on = f" on {', '.join(hosts)}" if hosts else ""
    return (
        f"; rank {names}{on} never entered {stuck.op} #{stuck.seq}, which rank {entered} entered",
        {"missing_ranks": names, "entered_ranks": entered},
        f"Rank {names}{on} did not enter the collective the others wait in: look at its process.",
    )


DETECTOR = Detector(
    name="job_hang",
    incidents=(
        IncidentKind(
            name="job_hang",
            title="Job hang",
            colour="black",
            hint="See the incident named as the cause; else each rank's last collective.",
            describe=by_the_job_stage,
        ),
    ),
    job=lambda config: Hangs(config.job_hang),
    config=("job_hang", HangConfig),
)
