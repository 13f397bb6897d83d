"""Each job's rhythm as the fabric shows it, set beside its step time as its own records give it:
the periods stage 1 judged on its hosts' NICs (``nic_periods``) and the steps its ranks marked
(``job_steps``). The report and the ``fw-job-timeline`` dashboard read these (``docs/capacity.md``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.storage.backends import lit
from fabricwatch.storage.queries import Store

AGREE = 0.1
"""How close the fabric's period and the records' step time must be to agree (a share of the step)."""


OPEN = "18446744073709551615"
"""Where a phase still open ends: the largest UInt64, so any time bound past it holds."""

NIC_HOSTS_SQL = (
    "SELECT DISTINCT host, nic FROM topology_nics WHERE topo_ns = (SELECT max(topo_ns) FROM topology_nics)"
)
"""Each NIC's host, from the latest topology."""


def job_hosts_sql(where: str) -> str:
    """Each job's hosts and the span it ran on each (``job``, ``host``, ``lo``, ``hi``), from its
    phases and its steps, for the jobs ``where`` selects (SQL on ``job``). The report and the
    ``fw-job-timeline`` dashboard read the same."""
    return (
        "SELECT job, host, min(b) AS lo, max(e) AS hi FROM ("
        f"SELECT job, arrayJoin(hosts) AS host, begin_ns AS b, if(end_ns < begin_ns, {OPEN}, end_ns) AS e "
        f"FROM phases WHERE {where} "
        "UNION ALL SELECT job, host, begin_ns AS b, begin_ns + dur_ns AS e "
        f"FROM job_steps WHERE {where} AND host != ''"
        ") GROUP BY job, host"
    )


def periods_sql(jobs: list[str], lo: int, hi: int, bucket_ns: int) -> str:
    """Per job and time bucket: the median period of its hosts' NICs, and how many NICs said one.
    The median, because a host another job shares reads that job's rhythm too."""
    return (
        f"SELECT j.job, intDiv(p.ts_ns, {bucket_ns}) * {bucket_ns} AS t, "
        "quantile(0.5)(p.period_s), uniqExact(p.device) "
        f"FROM nic_periods AS p INNER JOIN ({NIC_HOSTS_SQL}) AS n ON p.device = n.nic "
        f"INNER JOIN ({job_hosts_sql(f'job IN ({_names(jobs)})')}) AS j ON j.host = n.host "
        f"WHERE p.ts_ns BETWEEN {lo} AND {hi} AND p.ts_ns BETWEEN j.lo AND j.hi "
        "GROUP BY j.job, t ORDER BY j.job, t"
    )


def _names(jobs: list[str]) -> str:
    return ", ".join(lit(j) for j in jobs)


@dataclass(frozen=True)
class JobRhythm:
    """A job's period over time (``times``, ``period_s``: the median of its NICs' at each), and
    beside it the step time its records give (``step_times``, ``step_s``: the median step begun
    in each time bucket; empty when it marks none)."""

    job: str
    times: np.ndarray
    period_s: np.ndarray
    nics: int
    step_times: np.ndarray
    step_s: np.ndarray

    @property
    def median_s(self) -> float:
        return float(np.median(self.period_s))

    @property
    def median_step_s(self) -> float | None:
        return float(np.median(self.step_s)) if len(self.step_s) else None

    @property
    def agrees(self) -> bool | None:
        """Whether the fabric's period is the records' step time (None: no steps to compare with)."""
        step = self.median_step_s
        return None if step is None else abs(self.median_s / step - 1) <= AGREE


def job_rhythms(store: Store, jobs: list[str], lo: int, hi: int, bucket_ns: int) -> list[JobRhythm]:
    """The rhythm of each of ``jobs`` whose NICs said a period in ``[lo, hi]``."""
    if not jobs:
        return []
    bucket_ns = max(int(bucket_ns), 1)
    periods = _by_job(store.query(periods_sql(jobs, lo, hi, bucket_ns)))
    steps = _by_job(
        store.query(
            f"SELECT job, intDiv(begin_ns, {bucket_ns}) * {bucket_ns} AS t, quantile(0.5)(dur_ns) / 1e9, "
            f"count() FROM job_steps WHERE job IN ({_names(jobs)}) "
            f"AND begin_ns BETWEEN {lo} AND {hi} GROUP BY job, t ORDER BY job, t"
        )
    )
    out = []
    for job, (times, period, nics) in sorted(periods.items()):
        step_times, step_s, _ = steps.get(job, (np.zeros(0, "datetime64[ns]"), np.zeros(0), np.zeros(0)))
        out.append(JobRhythm(job, times, period, int(nics.max()), step_times, step_s))
    return out


def _by_job(rows: list[tuple]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Rows of (job, time ns, value, count) as per-job arrays of times, values and counts."""
    grouped: dict[str, list[tuple]] = {}
    for job, t, value, n in rows:
        grouped.setdefault(job, []).append((int(t), float(value), int(n)))
    return {
        job: (
            np.array([r[0] for r in rs], dtype="datetime64[ns]"),
            np.array([r[1] for r in rs]),
            np.array([r[2] for r in rs]),
        )
        for job, rs in grouped.items()
    }
