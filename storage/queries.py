"""Read queries of the store, shared by the report and the Grafana push: rates at the finest
resolution that holds a range, incidents, ports of interest, ECMP shares and heatmaps.

They read the same tables the dashboards do (``rates_raw`` and its rollups, ``anomalies_latest``,
``topology_ecmp``), so they work on a replay's chdb directory and on production data alike.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from fabricwatch.schemas.bandwidth import bucket_name
from fabricwatch.schemas.messages import PORT_RATE_COLUMNS, Anomaly, RootCause
from fabricwatch.storage.backends import lit
from fabricwatch.storage.schema import ROLLUPS


class Store(Protocol):
    """What the report needs of a store: SQL in, rows out (``streams.clickhouse_backend``)."""

    def query(self, sql: str) -> list[tuple]: ...


@dataclass(frozen=True)
class Incident:
    fingerprint: str
    kind: str
    severity: str
    status: str
    start_ns: int
    end_ns: int
    root_device: str
    root_port: str
    root_group: str
    devices: tuple[str, ...]
    jobs: tuple[str, ...]
    summary: str

    @property
    def root(self) -> str:
        return self.root_group or ":".join(x for x in (self.root_device, self.root_port) if x)


@dataclass(frozen=True)
class Series:
    """One port's bucketed metrics: times (datetime64[ns]) and a column per metric."""

    times: np.ndarray
    columns: dict[str, np.ndarray]


_PORT_METRICS = (
    "tx_util",
    "rx_util",
    "rx_pause_frac",
    "tx_pause_frac",
    "ecn_marked_pps",
    "queue_bytes_max",
    "watermark_bytes_max",
)


def parse_time(text: str | None) -> int | None:
    """``--start``/``--end``: ISO 8601 (naive means UTC) or integer nanoseconds since the epoch."""
    if text is None:
        return None
    if text.isdigit():
        ns = int(text)
        if ns < 10**17:
            raise ValueError(
                f"{text}: an integer time is in nanoseconds since the epoch; this looks like seconds"
            )
        return ns
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r}: not an ISO 8601 time (2026-01-01T00:02:00) or integer ns") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp()) * 10**9 + when.microsecond * 1000


_PEAK_METRICS = {
    "tx_util",
    "rx_util",
    "rx_pause_frac",
    "tx_pause_frac",
    "queue_bytes_max",
    "watermark_bytes_max",
    "pg_headroom_bytes_max",
    "pg_shared_bytes_max",
}
"""Read from a rollup as the bucket's maximum (a 15 s storm must not average away); others as its mean."""


def rates_source(store: Store, start_ns: int | None, end_ns: int | None, resolution: str | None) -> str:
    """``rates_raw``, or a rollup presented with the raw table's columns (one row per port and bucket)."""
    candidates = ["rates_raw", *ROLLUPS] if resolution is None else [resolution]
    if not set(candidates) <= {"rates_raw", *ROLLUPS}:
        raise ValueError(f"resolution {resolution!r}: one of rates_raw, {', '.join(ROLLUPS)}")
    for table in candidates:
        src = table if table == "rates_raw" else _rollup_source(table, start_ns, end_ns)
        if store.query(f"SELECT count() FROM {src}{_where_ns(start_ns, end_ns)}")[0][0]:
            return src
    return candidates[0]


def _rollup_source(table: str, start_ns: int | None, end_ns: int | None) -> str:
    seconds = ROLLUPS[table][0]
    cols = ", ".join(
        f"max({m}_max) AS {m}" if m in _PEAK_METRICS else f"sum({m}_sum) / sum({m}_n) AS {m}"
        for m in PORT_RATE_COLUMNS
    )
    bounds = []
    if start_ns is not None:
        bounds.append(f"ts >= toDateTime({start_ns // 10**9 - seconds})")
    if end_ns is not None:
        bounds.append(f"ts <= toDateTime({end_ns // 10**9})")
    where = " WHERE " + " AND ".join(bounds) if bounds else ""
    return (
        f"(SELECT ts, toUInt64(toUnixTimestamp(ts)) * 1000000000 AS ts_ns, device, device_kind, port, "
        f"toFloat32({seconds}) AS dt_s, {cols} FROM {table}{where} GROUP BY ts, device, device_kind, port)"
    )


def time_range(store: Store, src: str, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    where = _where_ns(start_ns, end_ns)
    (row,) = store.query(f"SELECT count(), min(ts_ns), max(ts_ns) FROM {src}{where}")
    if not row[0]:
        raise ValueError(f"no rates stored between {when(start_ns)} and {when(end_ns)}")
    lo = start_ns if start_ns is not None else int(row[1])
    hi = end_ns if end_ns is not None else int(row[2])
    return lo, max(hi, lo + 1)


def _where_ns(start_ns: int | None, end_ns: int | None, column: str = "ts_ns") -> str:
    parts = []
    if start_ns is not None:
        parts.append(f"{column} >= {int(start_ns)}")
    if end_ns is not None:
        parts.append(f"{column} <= {int(end_ns)}")
    return " WHERE " + " AND ".join(parts) if parts else ""


def bucket_ns(store: Store, src: str, lo: int, hi: int, max_points: int) -> int:
    """At least the poll interval (no empty buckets between polls), at most range / max_points."""
    (row,) = store.query(f"SELECT median(dt_s) FROM {src} WHERE ts_ns BETWEEN {lo} AND {hi}")
    poll_ns = int((row[0] or 1.0) * 1e9)
    return max(poll_ns, -(-(hi - lo) // max_points))


def incidents(store: Store, lo: int, hi: int) -> list[Incident]:
    """Every incident overlapping ``[lo, hi]`` in its latest state, one per (fingerprint, start).

    Not from ``anomalies_latest``, which keeps one row per fingerprint: the same fault found again
    in a later run (a rerun of a scenario, a recurring incast at the same root) has the same
    fingerprint and a later start, and would hide the earlier one from the listing and the shading.
    A report reads the events of its range once; that costs nothing worth keeping a table for."""
    rows = store.query(
        "SELECT fingerprint, argMax(kind, ts_ns), argMax(severity, ts_ns), argMax(status, ts_ns), "
        "start_ns, argMax(coalesce(end_ns, ts_ns), ts_ns) AS until, argMax(root_device, ts_ns), "
        "argMax(root_port, ts_ns), argMax(root_group, ts_ns), argMax(devices, ts_ns), "
        "argMax(jobs, ts_ns), argMax(summary, ts_ns) "
        f"FROM anomaly_events WHERE start_ns <= {hi} GROUP BY fingerprint, start_ns "
        f"HAVING until >= {lo} ORDER BY start_ns, fingerprint"
    )
    return [
        Incident(
            r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), r[6], r[7], r[8], tuple(r[9]), tuple(r[10]), r[11]
        )
        for r in rows
    ]


def ports_of_interest(
    store: Store, src: str, lo: int, hi: int, incidents: list[Incident], limit: int
) -> list[tuple[str, str]]:
    """Roots of the anomalies first (what a post-mortem asks about), then the ports most paused,
    marking ECN or busiest in the range."""
    chosen: list[tuple[str, str]] = []
    for inc in incidents:
        if inc.root_device and inc.root_port and (inc.root_device, inc.root_port) not in chosen:
            chosen.append((inc.root_device, inc.root_port))
    rows = store.query(
        f"SELECT device, port FROM {src} "
        f"WHERE ts_ns BETWEEN {lo} AND {hi} GROUP BY device, port "
        "ORDER BY max(coalesce(rx_pause_frac, 0)) DESC, max(coalesce(ecn_marked_pps, 0)) DESC, "
        f"max(coalesce(tx_util, 0)) DESC, device, port LIMIT {int(limit) * 2}"
    )
    chosen += [(d, p) for d, p in rows if (d, p) not in chosen]
    return chosen[:limit]


def port_series(store: Store, src: str, device: str, port: str, lo: int, hi: int, bucket_ns: int) -> Series:
    aggs = ", ".join(f"max({m})" if "bytes" in m or "frac" in m else f"avg({m})" for m in _PORT_METRICS)
    rows = store.query(
        f"SELECT intDiv(ts_ns, {bucket_ns}) * {bucket_ns} AS t, {aggs} FROM {src} "
        f"WHERE device = {lit(device)} AND port = {lit(port)} AND ts_ns BETWEEN {lo} AND {hi} "
        "GROUP BY t ORDER BY t"
    )
    return _series(rows, _PORT_METRICS)


def _series(rows: list[tuple], names: tuple[str, ...]) -> Series:
    times = np.array([int(r[0]) for r in rows], dtype="datetime64[ns]")
    cols = {
        name: np.array([np.nan if r[i + 1] is None else float(r[i + 1]) for r in rows])
        for i, name in enumerate(names)
    }
    return Series(times, cols)


def ecmp_shares(
    store: Store, src: str, lo: int, hi: int, bucket_ns: int, max_groups: int
) -> dict[str, dict[str, Series]]:
    """Group → member → share of the group's transmitted bits per bucket."""
    rows = store.query(
        f"""
SELECT group_id, member, t, bits / nullIf(sum(bits) OVER (PARTITION BY group_id, t), 0) AS share
FROM (
    SELECT e.group_id AS group_id, r.port AS member, intDiv(r.ts_ns, {bucket_ns}) * {bucket_ns} AS t,
           sum(r.tx_bps * r.dt_s) AS bits
    FROM {src} AS r
    INNER JOIN (
        SELECT group_id, device, member FROM topology_ecmp
        WHERE topo_ns = (SELECT max(topo_ns) FROM topology_ecmp)
    ) AS e ON r.device = e.device AND r.port = e.member
    WHERE r.ts_ns BETWEEN {lo} AND {hi}
    GROUP BY group_id, member, t
)
ORDER BY group_id, member, t
"""
    )
    grouped: dict[str, dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for group, member, t, share in rows:
        grouped[group][member].append((t, share))
    ranked = sorted(grouped, key=lambda g: (-_imbalance(grouped[g]), g))[:max_groups]
    return {g: {m: _series(pts, ("share",)) for m, pts in sorted(grouped[g].items())} for g in sorted(ranked)}


def _imbalance(members: dict[str, list[tuple]]) -> float:
    """Peak share over the fair share: the groups that collapsed come first."""
    peak = max((s for pts in members.values() for _, s in pts if s is not None), default=0.0)
    return peak * len(members)


@dataclass(frozen=True)
class Grid:
    rows: list[str]
    times: np.ndarray  # bucket starts
    bucket_ns: int
    values: np.ndarray  # rows x times


def heatmap_grid(
    store: Store, src: str, metric: str, lo: int, hi: int, bucket_ns: int, top: int
) -> Grid | None:
    rows = store.query(
        f"""
SELECT concat(device, ':', port) AS name, intDiv(ts_ns, {bucket_ns}) * {bucket_ns} AS t, max({metric})
FROM {src}
WHERE ts_ns BETWEEN {lo} AND {hi} AND (device, port) IN (
    SELECT device, port FROM {src} WHERE ts_ns BETWEEN {lo} AND {hi}
    GROUP BY device, port HAVING max({metric}) > 0 ORDER BY max({metric}) DESC, device, port LIMIT {int(top)})
GROUP BY name, t ORDER BY name, t
"""
    )
    if not rows:
        return None
    names = sorted({r[0] for r in rows})
    times = np.arange(lo // bucket_ns * bucket_ns, hi + 1, bucket_ns, dtype=np.int64)
    grid = np.full((len(names), len(times)), np.nan)
    row_of = {n: i for i, n in enumerate(names)}
    for name, t, v in rows:
        col = (int(t) - int(times[0])) // bucket_ns
        if 0 <= col < len(times) and v is not None:
            grid[row_of[name], col] = float(v)
    return Grid(names, times.astype("datetime64[ns]"), bucket_ns, grid)


def anomalies_from_store(store: Any, since_ns: int | None = None) -> list[Anomaly]:
    """Each incident's newest state from the ClickHouse store (``anomalies_latest``), so a push
    after a replay, or from cron in production, annotates what the store holds."""
    where = f" WHERE coalesce(end_ns, ts_ns) >= {int(since_ns)}" if since_ns is not None else ""
    rows = store.query(
        "SELECT fingerprint, kind, severity, status, start_ns, ts_ns, end_ns, root_device, root_port, "
        "root_priority, root_group, summary, hint, devices, hosts, jobs, collectives, evidence, caused_by "
        f"FROM anomalies_latest FINAL{where} ORDER BY start_ns"
    )
    return [
        Anomaly(
            fingerprint=r[0],
            kind=r[1],
            severity=r[2],
            status=r[3],
            start_ns=int(r[4]),
            ts_ns=int(r[5]),
            end_ns=None if r[6] is None else int(r[6]),
            root=RootCause(device=r[7], port=r[8], priority=r[9], group=r[10]),
            summary=r[11],
            hint=r[12],
            devices=list(r[13]),
            hosts=list(r[14]),
            jobs=list(r[15]),
            collectives=list(r[16]),
            evidence=json.loads(r[17]) if r[17] else {},
            caused_by=r[18],
        )
        for r in rows
    ]


def when(ts_ns: int | None) -> str:
    if ts_ns is None:
        return "(open)"
    return datetime.fromtimestamp(ts_ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class JobPhase:
    op: str
    comm: str
    begin_ns: int
    end_ns: int
    bytes: int
    hosts: tuple[str, ...]


def jobs_in_range(store: Store, lo: int, hi: int, limit: int) -> list[str]:
    """Jobs with phases in the range, the ones that moved the most bytes first."""
    rows = store.query(
        f"SELECT job FROM phases WHERE begin_ns <= {hi} AND greatest(end_ns, begin_ns) >= {lo} "
        f"GROUP BY job ORDER BY sum(bytes) DESC, job LIMIT {int(limit)}"
    )
    return [r[0] for r in rows]


def job_phases(store: Store, job: str, lo: int, hi: int) -> list[JobPhase]:
    """A job's collectives in the range, each phase once (the table merges repeats lazily)."""
    rows = store.query(
        "SELECT DISTINCT op, comm, begin_ns, greatest(end_ns, begin_ns), bytes, hosts FROM phases "
        f"WHERE job = {lit(job)} AND begin_ns <= {hi} AND greatest(end_ns, begin_ns) >= {lo} "
        "ORDER BY begin_ns, op, comm"
    )
    return [JobPhase(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), tuple(r[5])) for r in rows]


@dataclass(frozen=True)
class CallSeries:
    """One collective of a job at one message size (``schemas/bandwidth.size_bucket``), bucketed
    in time: the median of its ranks' call times and bus bandwidths in each bucket."""

    op: str
    size_bucket: int
    times: np.ndarray
    dur_ms: np.ndarray
    busbw: np.ndarray
    """GB/s (1e9 bytes a second), as nccl-tests prints it."""
    upper_bound: bool
    """The times include waiting to start (the Flight Recorder's): upper bounds."""


_CALLS = (
    "(SELECT DISTINCT job, comm, op, rank, begin_ns, dur_ns, size_bucket, busbw, upper_bound "
    "FROM collective_calls WHERE {where})"
)
"""A job's calls, each once: the table merges a call stored twice only lazily."""


def job_calls(store: Store, job: str, lo: int, hi: int, bucket_ns: int, limit: int = 4) -> list[CallSeries]:
    """A job's timed collectives in the range: for each of its ``limit`` (collective, message size)
    seen in the most time buckets, the median time and bus bandwidth per bucket. Empty when its source
    timed nothing (an NCCL log gives phases, no durations)."""
    calls = _CALLS.format(where=f"job = {lit(job)} AND begin_ns BETWEEN {lo} AND {hi}")
    rows = store.query(
        f"SELECT op, size_bucket, intDiv(begin_ns, {bucket_ns}) * {bucket_ns} AS t, "
        "quantile(0.5)(dur_ns) / 1e6, quantile(0.5)(busbw), max(upper_bound) "
        f"FROM {calls} GROUP BY op, size_bucket, t ORDER BY op, size_bucket, t"
    )
    by_call: dict[tuple[str, int], list[tuple]] = defaultdict(list)
    for r in rows:
        by_call[(r[0], int(r[1]))].append(r)
    busiest = sorted(by_call, key=lambda k: (-len(by_call[k]), k))[:limit]
    out = []
    for op, bucket in sorted(busiest):
        rs = by_call[(op, bucket)]
        out.append(
            CallSeries(
                op,
                bucket,
                np.array([int(r[2]) for r in rs], dtype="datetime64[ns]"),
                np.array([float(r[3]) for r in rs]),
                np.array([float(r[4]) for r in rs]),
                any(bool(r[5]) for r in rs),
            )
        )
    return out


@dataclass(frozen=True)
class StepSummary:
    """A job's training steps in a range: how many, their median and p99 time, and where the
    source timed their kernels, the median share in collectives and of it not hidden by compute
    (None where no step of the job says: unknown, not 0 %)."""

    job: str
    steps: int
    ranks: int
    median_ms: float
    p99_ms: float
    in_collectives: float | None
    exposed: float | None


def job_steps(store: Store, jobs: list[str], lo: int, hi: int) -> list[StepSummary]:
    """The steps of each of ``jobs`` that marked any in the range, each step once."""
    if not jobs:
        return []
    rows = store.query(
        "SELECT job, count(), uniqExact(rank), quantile(0.5)(dur_ns) / 1e6, quantile(0.99)(dur_ns) / 1e6, "
        "quantileIf(0.5)(coll_ns / dur_ns, coll_ns IS NOT NULL), "
        "quantileIf(0.5)(exposed_ns / dur_ns, exposed_ns IS NOT NULL), countIf(coll_ns IS NOT NULL) "
        "FROM (SELECT DISTINCT job, rank, step, begin_ns, dur_ns, coll_ns, exposed_ns FROM job_steps "
        f"WHERE job IN ({', '.join(lit(j) for j in jobs)}) AND begin_ns BETWEEN {lo} AND {hi}) "
        "GROUP BY job ORDER BY job"
    )
    out = []
    for job, n, ranks, median, p99, coll, exposed, timed in rows:
        shares = (float(coll), float(exposed)) if timed else (None, None)
        out.append(StepSummary(job, int(n), int(ranks), float(median), float(p99), *shares))
    return out


COST_MIN_CALLS = 5
"""Calls of a (collective, size) needed before and during an incident to say what it cost."""


def job_costs(store: Store, incident: Incident, before_ns: int = 60_000_000_000) -> list[str]:
    """What a fabric incident cost each job it names: per job, the (collective, message size)
    whose median bus bandwidth while the incident was open moved most from the ``before_ns``
    before it began ("llm-a AllReduce 256 MiB: bus bandwidth -38 % while open"). Nothing for a
    job whose calls are not timed, or too few on either side (``COST_MIN_CALLS``)."""
    out = []
    s, e = incident.start_ns, max(incident.end_ns, incident.start_ns)
    for job in incident.jobs:
        calls = _CALLS.format(where=f"job = {lit(job)} AND begin_ns BETWEEN {s - before_ns} AND {e}")
        rows = store.query(
            f"SELECT op, size_bucket, quantileIf(0.5)(busbw, begin_ns >= {s}), countIf(begin_ns >= {s}), "
            f"quantileIf(0.5)(busbw, begin_ns < {s}), countIf(begin_ns < {s}) FROM {calls} "
            "GROUP BY op, size_bucket"
        )
        moved = [
            (float(r[2]) / float(r[4]) - 1.0, r[0], int(r[1]))
            for r in rows
            if min(int(r[3]), int(r[5])) >= COST_MIN_CALLS and float(r[4]) > 0
        ]
        if moved:
            change, op, bucket = min(moved, key=lambda m: (-abs(m[0]), m[1], m[2]))
            out.append(f"{job} {op} {bucket_name(bucket)}: bus bandwidth {change:+.0%} while open")
    return out


def host_ports(store: Store, hosts: set[str]) -> list[tuple[str, str]]:
    """The leaf ports the hosts' NICs are cabled to, in the latest topology: where a job's
    traffic enters and leaves the fabric."""
    if not hosts:
        return []
    names = ", ".join(lit(h) for h in sorted(hosts))
    rows = store.query(
        "SELECT DISTINCT leaf, leaf_port FROM topology_nics "
        f"WHERE topo_ns = (SELECT max(topo_ns) FROM topology_nics) AND host IN ({names}) "
        "ORDER BY leaf, leaf_port"
    )
    return [(r[0], r[1]) for r in rows]


def host_pairs(store: Store, job: str) -> dict[tuple[str, str], int]:
    """A job's connections over the network from host to host, from its communication graphs
    (``comm_edges``) and where its ranks are (``comm_ranks``): each connection counted once,
    whichever end reported it. The same join as ``JobAttribution.host_pairs``, in SQL."""
    rows = store.query(host_pairs_sql(f"job = {lit(job)}"))
    return {(r[1], r[2]): int(r[3]) for r in rows}


def host_pairs_sql(jobs: str) -> str:
    """Host-pair connections of the jobs ``jobs`` (a condition on ``job``), as (job, sending
    host, receiving host, connections) rows: one join per nesting level and ``USING``, so that it
    runs on an old server (18.16) as on chdb; the dashboard ``fw-job-timeline`` runs the same."""
    ranks = f"SELECT job, comm, rank, any(host) AS host FROM comm_ranks WHERE {jobs} GROUP BY job, comm, rank"
    return f"""
SELECT job, sending_host, host AS receiving_host, count() AS connections
FROM (
    SELECT job, comm, dst_rank AS rank, sending_host
    FROM (
        SELECT job, comm, dst_rank, host AS sending_host
        FROM (
            SELECT DISTINCT job, comm, src_rank AS rank, dst_rank, channel, conn
            FROM comm_edges WHERE {jobs} AND transport = 'NET'
        ) AS e
        ALL INNER JOIN ({ranks}) AS a USING (job, comm, rank)
    ) AS s
) AS t
ALL INNER JOIN ({ranks}) AS b USING (job, comm, rank)
WHERE sending_host != receiving_host
GROUP BY job, sending_host, receiving_host
ORDER BY job, sending_host, receiving_host
"""
