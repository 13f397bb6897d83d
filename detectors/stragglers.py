"""One rank that keeps the others waiting (kind ``job_straggler``).

A collective runs once its last rank has entered, so the others wait for the late one and the
late one shows the shortest time in the call (NCCL's records show a straggler that way, not as a
long call). Per communicator, over its last ``window_calls`` calls with at least two ranks'
records: the rank that entered last, and by how much after the median rank. A rank that is last
in ``share`` of them, by a median of at least ``min_late_ms`` and of ``min_late_share`` of the
call's own time, is a straggler: named with its host, how late and over how many calls. The
fabric cannot make one rank enter late (it slows the call for every rank), so the job stage
blames the host unless a fabric incident is open on that host.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np

from fabricwatch.detectors.job_calls import CommCalls
from fabricwatch.detectors.spec import Detector, IncidentKind, JobFinding, by_the_job_stage
from fabricwatch.schemas.config import AtLeastOne, Fraction, Positive
from fabricwatch.schemas.messages import RootCause


class StragglerConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    window_calls: AtLeastOne = 10
    share: Fraction = 0.7
    min_late_ms: Positive = 2.0
    min_late_share: Fraction = 0.1


class Stragglers:
    def __init__(self, config: StragglerConfig) -> None:
        self.config = config
        self._since: dict[tuple[str, str, int], int] = {}

    def check(self, comm: CommCalls, now_ns: int) -> list[JobFinding]:
        c = self.config
        calls = [o for o in list(comm.done)[-c.window_calls :] if len(o.ranks) >= 2]
        found = self._straggler(calls) if len(calls) >= c.window_calls else None
        for key in [
            k for k in self._since if k[:2] == (comm.job, comm.comm) and (found is None or k[2] != found[0])
        ]:
            del self._since[key]
        if found is None:
            return []
        rank, late_ns, count, first_ns = found
        key = (comm.job, comm.comm, rank)
        start = self._since.setdefault(key, first_ns)
        host = comm.rank_hosts.get(rank, "")
        late_ms = late_ns / 1e6
        return [
            JobFinding(
                kind="job_straggler",
                job=comm.job,
                comm=comm.comm,
                key=str(rank),
                start_ns=start,
                severity="warning",
                root=RootCause(host or comm.job, group="" if host else f"job:{comm.job}"),
                summary=(
                    f"rank {rank} of {comm.job} ({host or 'host unknown'}) enters its collectives "
                    f"{late_ms:.1f} ms after the median rank, last in {count} of the last {len(calls)}"
                ),
                hint=f"The others wait for rank {rank}: check {host or 'its host'} (GPU clocks and "
                "throttling, CPU contention, data loading), not the fabric.",
                evidence={
                    "rank": rank,
                    "late_ms": round(late_ms, 3),
                    "last_in": count,
                    "of_calls": len(calls),
                },
                hosts=(host,) if host else (),
                collective=f"{comm.job} {calls[-1].op} comm {comm.comm}",
            )
        ]

    def _straggler(self, calls: list) -> tuple[int, float, int, int] | None:
        """(rank, its median lateness in ns, calls it was last in, the first of those) or None."""
        c = self.config
        last = [
            (int(o.ranks[np.argmax(o.begins)]), float(o.begins.max() - np.median(o.begins)), o) for o in calls
        ]
        rank, count = Counter(r for r, _, _ in last).most_common(1)[0]
        mine = [(late, o) for r, late, o in last if r == rank]
        late = float(np.median([x for x, _ in mine]))
        call_ns = float(np.median([float(o.durs.min()) for _, o in mine]))
        if count < c.share * len(calls) or late < max(c.min_late_ms * 1e6, c.min_late_share * call_ns):
            return None
        return rank, late, count, mine[0][1].begin_ns


DETECTOR = Detector(
    name="job_straggler",
    incidents=(
        IncidentKind(
            name="job_straggler",
            title="Straggler rank",
            colour="tab:cyan",
            hint="Check the host named: the others wait for it.",
            describe=by_the_job_stage,
        ),
    ),
    job=lambda config: Stragglers(config.job_straggler),
    config=("job_straggler", StragglerConfig),
)
