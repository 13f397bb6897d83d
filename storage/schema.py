"""The ClickHouse schema: one generator of DDL, two dialects.

The same DDL text serves chdb (the embedded engine, a current ClickHouse) and a server reached over
the native protocol, which may be old: Debian ships 18.16, which has no TTL, no LowCardinality, no
DateTime64 and no column codecs. ``Dialect`` says what a server can take and every statement is
generated through it, so an old server gets the same tables with those clauses left out (``ts``
then has second resolution; ``ts_ns`` always keeps the exact time).

Layout (Akvorado's pattern): ``rates_raw`` per port and poll with a short TTL, rollups at 10 s,
1 min and 1 h fed by materialized views with longer TTLs, day partitions, ``ORDER BY`` starting with
(device, port) because every dashboard filters on them. Anomaly lifecycle events, phases and
topology snapshots sit beside them. ``docs/storage.md`` describes every table and column.

The versions of this schema and how a database moves between them are in ``migrations.py``.

``cluster`` generates the sharded variant: every table ``ON CLUSTER``, the data in ``<name>_local``
tables and a ``Distributed`` table under the plain name, so queries read the same names everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricwatch.schemas.messages import PORT_RATE_COLUMNS

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Dialect:
    """What the target ClickHouse understands, from its version."""

    version: tuple[int, int]

    @classmethod
    def parse(cls, version: str) -> Dialect:
        """``'18.16.1'`` or ``'26.9.2.1'`` → Dialect; anything else is a clear error."""
        m = re.match(r"^\s*(\d+)\.(\d+)", version)
        if m is None:
            raise ValueError(f"cannot read a ClickHouse version from {version!r}")
        return cls((int(m.group(1)), int(m.group(2))))

    @property
    def modern(self) -> bool:
        """TTL (19.6), LowCardinality (19.x default), DateTime64 (20.1), codecs (19.x): 20.3+ has all."""
        return self.version >= (20, 3)

    def lc(self, inner: str = "String") -> str:
        return f"LowCardinality({inner})" if self.modern else inner

    def time_ms(self) -> str:
        return "DateTime64(3, 'UTC')" if self.modern else "DateTime('UTC')"

    def codec(self, spec: str) -> str:
        return f" CODEC({spec})" if self.modern else ""

    def ttl(self, days: int) -> str:
        """Rows expire ``days`` after they were stored (``inserted``), not after their own time: a
        week-old trace replayed for a post-mortem stays as long as live data would."""
        return f"\nTTL inserted + INTERVAL {days} DAY" if self.modern else ""

    def state_of_nullable(self) -> str:
        """The argument type ``avgState(x)`` reports for a Nullable(Float64) ``x``: old servers
        strip the Nullable (their -Null combinator wraps the state), current ones keep it."""
        return "Nullable(Float64)" if self.modern else "Float64"

    def simple(self, function: str, inner: str) -> str:
        """A column AggregatingMergeTree folds with ``function`` on merge (SimpleAggregateFunction,
        19.8+); an old server gets the plain type and a MergeTree that keeps the rows apart."""
        return f"SimpleAggregateFunction({function}, {inner})" if self.modern else inner

    def compact_below(self, size: int) -> str:
        """Parts under ``size`` bytes in one file rather than a file per column (20.3+). A 10 s
        rollup's insert of a 200,000-row batch is ~11 MB of 90 column streams, just over the 10 MB
        default: written compact, inserts with all views are ~1.15x faster; merges make wide parts."""
        return f"\nSETTINGS min_bytes_for_wide_part = {size}" if self.modern else ""

    def inserted(self, aggregating: bool = False) -> list[str]:
        """The storage time that TTL counts from (old servers have no TTL and get no column)."""
        if not self.modern:
            return []
        kind = "SimpleAggregateFunction(max, DateTime('UTC'))" if aggregating else "DateTime('UTC')"
        return [f"inserted {kind} DEFAULT now()"]


MODERN = Dialect((26, 9))
OLD_DEBIAN = Dialect((18, 16))


@dataclass(frozen=True)
class SchemaOptions:
    """Where and how long. TTLs in days; ``cluster`` set → ON CLUSTER DDL with Distributed tables."""

    database: str = "fabricwatch"
    cluster: str | None = None
    replicated: bool = False
    raw_ttl_days: int = 2
    ttl_10s_days: int = 14
    ttl_1m_days: int = 90
    ttl_1h_days: int = 730

    def __post_init__(self) -> None:
        for name in (self.database, self.cluster or "x"):
            if not _IDENT.match(name):
                raise ValueError(f"{name!r} is not a plain identifier (letters, digits, underscore)")
        for name in ("raw_ttl_days", "ttl_10s_days", "ttl_1m_days", "ttl_1h_days"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 day")
        if self.replicated and self.cluster is None:
            raise ValueError("replicated tables need a cluster")


ROLLUPS: dict[str, tuple[int, str, str]] = {
    "rates_10s": (10, "toDate(ts)", "ttl_10s_days"),
    "rates_1m": (60, "toDate(ts)", "ttl_1m_days"),
    "rates_1h": (3600, "toYYYYMM(ts)", "ttl_1h_days"),
}
"""Rollup table → (bucket seconds, partition expression, TTL option).

Each view reads the raw rows of an insert: the three run side by side on the insert's threads
(``parallel_view_processing``), where a cascade (1 min from 10 s, 1 h from 1 min) would run one
after the other. The hourly rollup is partitioned by month: a day partition of 24 rows per port
would make two years 730 tiny partitions."""

_V1_SOURCES = {"rates_10s": "rates_raw", "rates_1m": "rates_10s", "rates_1h": "rates_1m"}
"""Schema v1's cascade, kept only to build v1 as it was released (v3 replaced its rollups)."""


def _bucket(seconds: int, source: str = "rates_raw") -> str:
    """The bucket start: from raw rows by the exact ``ts_ns``, from a finer rollup by its ``ts``."""
    if source == "rates_raw":
        return f"toDateTime(intDiv(ts_ns, {seconds * 1_000_000_000}) * {seconds}, 'UTC')"
    return "toStartOfMinute(ts)" if seconds == 60 else "toStartOfHour(ts)"


RATE_METRICS = PORT_RATE_COLUMNS
"""Every metric column of ``rates_raw`` (and, as sum, count and peak, of each rollup) today."""

METRICS_V1: tuple[str, ...] = (
    "tx_bps",
    "rx_bps",
    "tx_util",
    "rx_util",
    "tx_pps",
    "rx_pps",
    "rx_pause_pps",
    "tx_pause_pps",
    "rx_pause_frac",
    "tx_pause_frac",
    "ecn_marked_pps",
    "cnp_sent_pps",
    "cnp_received_pps",
    "discards_pps",
    "errors_pps",
    "queue_bytes_max",
    "watermark_bytes_max",
)
"""The metrics schema v1 was released with (and v3's rollups kept): migrations build exactly these."""

METRICS_V4 = RATE_METRICS[len(METRICS_V1) :]
"""The metrics schema v4 added after them: link health, drops and the PFC watchdog."""


class DDL:
    """Statement builder for one dialect and set of options."""

    def __init__(self, dialect: Dialect, opts: SchemaOptions) -> None:
        self.d = dialect
        self.o = opts

    def on_cluster(self) -> str:
        return f" ON CLUSTER {self.o.cluster}" if self.o.cluster else ""

    def local(self, table: str) -> str:
        """The table that holds the data: ``<table>_local`` on a cluster, ``table`` otherwise."""
        return f"{self.o.database}.{table}_local" if self.o.cluster else f"{self.o.database}.{table}"

    def engine(self, table: str, kind: str, args: str = "") -> str:
        if not self.o.replicated:
            return f"{kind}({args})"
        path = f"'/clickhouse/tables/{{shard}}/{self.o.database}/{table}', '{{replica}}'"
        return f"Replicated{kind}({path}{', ' + args if args else ''})"

    def table(
        self,
        name: str,
        columns: list[str],
        kind: str,
        order_by: str,
        partition_by: str | None = None,
        ttl: str = "",
        version: str = "",
        shard_key: str = "rand()",
    ) -> list[str]:
        """CREATE TABLE (+ its Distributed front on a cluster)."""
        cols = ",\n    ".join(columns)
        parts = f"\nPARTITION BY {partition_by}" if partition_by else ""
        stmt = (
            f"CREATE TABLE IF NOT EXISTS {self.local(name)}{self.on_cluster()} (\n    {cols}\n)\n"
            f"ENGINE = {self.engine(name, kind, version)}{parts}\nORDER BY ({order_by}){ttl}"
        )
        return [stmt, self.distributed(name, shard_key)] if self.o.cluster else [stmt]

    def distributed(self, name: str, shard_key: str) -> str:
        """The Distributed front ``name`` over ``<name>_local`` (cluster only)."""
        db = self.o.database
        return (
            f"CREATE TABLE IF NOT EXISTS {db}.{name}{self.on_cluster()} AS {self.local(name)}\n"
            f"ENGINE = Distributed({self.o.cluster}, {db}, {name}_local, {shard_key})"
        )

    def view(self, name: str, target: str, select: str) -> str:
        """A materialized view writing into ``target``; on a cluster, shard-local to shard-local."""
        mv = f"{self.o.database}.{name}"
        head = f"CREATE MATERIALIZED VIEW IF NOT EXISTS {mv}{self.on_cluster()}"
        return f"{head}\nTO {self.local(target)}\nAS {select}"


def _raw_metric_type(d: Dialect) -> str:
    return f"Nullable(Float64){d.codec('ZSTD(1)')}"


def rates_raw(g: DDL, metrics: tuple[str, ...] = RATE_METRICS) -> list[str]:
    d = g.d
    cols = [
        f"ts {d.time_ms()}",
        f"ts_ns UInt64{d.codec('DoubleDelta, LZ4')}",
        f"device {d.lc()}",
        f"device_kind {d.lc()}",
        f"port {d.lc()}",
        f"dt_s Float32{d.codec('ZSTD(1)')}",
    ] + [f"{m} {_raw_metric_type(d)}" for m in metrics]
    cols += d.inserted()
    ttl = d.ttl(g.o.raw_ttl_days)
    return g.table(
        "rates_raw",
        cols,
        "ReplacingMergeTree",
        "device, port, ts, ts_ns",
        "toDate(ts)",
        ttl,
        shard_key="cityHash64(device)",
    )


def rollup_v1(g: DDL, name: str) -> list[str]:
    """Schema v1's rollup (avg and max states, cascaded): what a v1 database holds before v3."""
    seconds, partition, ttl_opt = ROLLUPS[name]
    source = _V1_SOURCES[name]
    d = g.d
    if not d.modern:  # 18.16 does not fire a view on a table another view writes into
        source = "rates_raw"
    cols = [
        "ts DateTime('UTC')",
        f"device {d.lc()}",
        f"device_kind {d.lc()}",
        f"port {d.lc()}",
        "samples AggregateFunction(count)",
    ]
    arg = d.state_of_nullable()
    for m in METRICS_V1:
        cols += [f"{m}_avg AggregateFunction(avg, {arg})", f"{m}_max AggregateFunction(max, {arg})"]
    cols += d.inserted(aggregating=True)
    ttl = d.ttl(getattr(g.o, ttl_opt))
    out = g.table(
        name,
        cols,
        "AggregatingMergeTree",
        "device, device_kind, port, ts",
        partition,
        ttl,
        shard_key="cityHash64(device)",
    )
    if source == "rates_raw":
        count = "countState()"
        states = [f"avgState({m}) AS {m}_avg, maxState({m}) AS {m}_max" for m in METRICS_V1]
    else:
        count = "countMergeState(samples)"
        states = [f"avgMergeState({m}_avg) AS {m}_avg, maxMergeState({m}_max) AS {m}_max" for m in METRICS_V1]
    select = (
        f"SELECT\n    {_bucket(seconds, source)} AS ts, device, device_kind, port, {count} AS samples,\n    "
        + ",\n    ".join(states)
        + f"\nFROM {g.local(source)}\nGROUP BY ts, device, device_kind, port"
    )
    out.append(g.view(f"{name}_mv", name, select))
    return out


def _rollup_metric_columns(d: Dialect, m: str) -> list[tuple[str, str]]:
    """A rollup's columns of metric ``m`` (schema v3): the sum and count of its known values and
    its peak. Read them with plain ``sum``/``max`` and a ``GROUP BY`` (a bucket may be in several
    rows until a merge folds them): ``sum(m_sum) / sum(m_n)`` is the mean."""
    return [
        (f"{m}_sum", d.simple("sum", "Nullable(Float64)")),
        (f"{m}_n", d.simple("sum", "UInt64")),
        (f"{m}_max", d.simple("max", "Nullable(Float64)")),
    ]


def rollup_table(g: DDL, name: str, table: str, metrics: tuple[str, ...] = RATE_METRICS) -> list[str]:
    """The v3 rollup ``name``, created as ``table`` (the name itself, or a staging name).

    Plain sums, counts and maxima rather than ``avgState``/``maxState``: a state column is
    serialised value by value on every insert, and the three rollups cost more than the raw table
    itself. SimpleAggregateFunction columns are plain numbers that AggregatingMergeTree still folds
    on merge. An old server has no SimpleAggregateFunction: there the rollup is a MergeTree whose
    rows are never folded, which the queries' ``GROUP BY`` makes equivalent."""
    _, partition, ttl_opt = ROLLUPS[name]
    d = g.d
    cols = [
        "ts DateTime('UTC')",
        f"device {d.lc()}",
        f"device_kind {d.lc()}",
        f"port {d.lc()}",
        f"samples {d.simple('sum', 'UInt64')}",
    ]
    cols += [f"{col} {kind}" for m in metrics for col, kind in _rollup_metric_columns(d, m)]
    cols += d.inserted(aggregating=True)
    tail = d.ttl(getattr(g.o, ttl_opt)) + d.compact_below(100 << 20)
    engine = "AggregatingMergeTree" if d.modern else "MergeTree"
    order = "device, device_kind, port, ts"
    return g.table(table, cols, engine, order, partition, tail, shard_key="cityHash64(device)")


def rollup_view(g: DDL, name: str, metrics: tuple[str, ...] = RATE_METRICS) -> str:
    seconds = ROLLUPS[name][0]
    values = [f"sum({m}) AS {m}_sum, count({m}) AS {m}_n, max({m}) AS {m}_max" for m in metrics]
    select = (
        f"SELECT\n    {_bucket(seconds)} AS ts, device, device_kind, port, count() AS samples,\n    "
        + ",\n    ".join(values)
        + f"\nFROM {g.local('rates_raw')}\nGROUP BY ts, device, device_kind, port"
    )
    return g.view(f"{name}_mv", name, select)


def _backfill_from_v1(g: DDL, name: str, table: str) -> str:
    """v1 states → v3 columns. An average state keeps its mean but not how many values were known,
    so a metric known in a bucket counts the bucket's samples (exact unless some of that bucket's
    polls lacked the metric); a metric never known stays NULL with a count of 0 (an old server's
    merged max says 0 there, its merged average NaN: the average decides)."""
    db = g.o.database
    inner = ["ts", "device", "device_kind", "port", "countMerge(samples) AS n"]
    outer = ["ts", "device", "device_kind", "port", "n"]
    for i, m in enumerate(METRICS_V1):
        inner += [f"avgMerge({m}_avg) AS a{i}", f"maxMerge({m}_max) AS x{i}"]
        known = f"NOT ifNull(isNaN(a{i}), 1)"
        outer += [f"if({known}, a{i} * n, NULL)", f"if({known}, n, 0)", f"if({known}, x{i}, NULL)"]
    values = ["samples", *(col for m in METRICS_V1 for col, _ in _rollup_metric_columns(g.d, m))]
    return (
        f"INSERT INTO {db}.{table} (ts, device, device_kind, port, {', '.join(values)})\n"
        f"SELECT {', '.join(outer)}\nFROM (\n    SELECT {', '.join(inner)}\n    FROM {db}.{name}\n"
        f"    GROUP BY ts, device, device_kind, port\n)"
    )


def rollups_v3(g: DDL) -> list[str]:
    """Replace the v1 rollups in place: detach their (cascaded) views, then for each rollup build
    the new table beside the old one, copy the old one's history in, drop the old table, rename
    the new one and attach its view."""
    db, cluster = g.o.database, g.on_cluster()
    out = [f"DROP TABLE IF EXISTS {db}.{name}_mv{cluster}" for name in ROLLUPS]
    for name in ROLLUPS:
        staging = f"{name}_v3"
        out += rollup_table(g, name, staging, METRICS_V1)
        out.append(_backfill_from_v1(g, name, staging))
        out.append(f"DROP TABLE IF EXISTS {g.local(name)}{cluster}")
        if g.o.cluster:
            out.append(f"DROP TABLE IF EXISTS {db}.{name}{cluster}")
            out.append(f"DROP TABLE IF EXISTS {db}.{staging}{cluster}")
        out.append(f"RENAME TABLE {g.local(staging)} TO {g.local(name)}{cluster}")
        if g.o.cluster:
            out.append(g.distributed(name, "cityHash64(device)"))
        out.append(rollup_view(g, name, METRICS_V1))
    return out


def metrics_v4(g: DDL) -> list[str]:
    """Add ``METRICS_V4`` to ``rates_raw`` and each rollup, in place: the columns go after the
    last v1 metric (where a new store has them, so both define the same tables), then each
    rollup's view is replaced by one that fills them. Rows stored before have them NULL
    (unknown), with a count of 0 in the rollups."""
    db, cluster = g.o.database, g.on_cluster()
    d = g.d
    raw = [(m, _raw_metric_type(d)) for m in METRICS_V4]
    added = {"rates_raw": (METRICS_V1[-1], raw)}
    for name in ROLLUPS:
        cols = [c for m in METRICS_V4 for c in _rollup_metric_columns(d, m)]
        added[name] = (f"{METRICS_V1[-1]}_max", cols)
    out = []
    for table, (after, cols) in added.items():
        adds = []
        for col, kind in cols:
            adds.append(f"ADD COLUMN {col} {kind} AFTER {after}")
            after = col
        fronts = [g.local(table)] + ([f"{db}.{table}"] if g.o.cluster else [])
        out += [f"ALTER TABLE {front}{cluster}\n    " + ",\n    ".join(adds) for front in fronts]
    for name in ROLLUPS:
        out += [f"DROP TABLE IF EXISTS {db}.{name}_mv{cluster}", rollup_view(g, name)]
    return out


def device_latest(g: DDL) -> list[str]:
    """Last stored poll per device: what the sink reads to know where a device's stored data ends
    (its duplicate check) and what a dashboard reads for "last seen"."""
    cols = [f"device {g.d.lc()}", "ts_ns UInt64"]
    out = g.table(
        "device_latest", cols, "ReplacingMergeTree", "device", version="ts_ns", shard_key="cityHash64(device)"
    )
    select = f"SELECT device, max(ts_ns) AS ts_ns FROM {g.local('rates_raw')} GROUP BY device"
    out.append(g.view("device_latest_mv", "device_latest", select))
    return out


def _anomaly_columns(d: Dialect, caused_by: bool = True) -> list[str]:
    """``caused_by``: the column v6 added (a v1 or v2 store is built without it, then migrated)."""
    return [
        "fingerprint String",
        f"kind {d.lc()}",
        f"severity {d.lc()}",
        f"status {d.lc()}",
        f"start {d.time_ms()}",
        f"ts {d.time_ms()}",
        f"end Nullable({d.time_ms()})",
        "start_ns UInt64",
        "ts_ns UInt64",
        "end_ns Nullable(UInt64)",
        f"root_device {d.lc()}",
        "root_port String",
        "root_priority Nullable(Int16)",
        "root_group String",
        "summary String",
        "hint String",
        "devices Array(String)",
        "hosts Array(String)",
        "jobs Array(String)",
        "collectives Array(String)",
        "evidence String",
    ] + (["caused_by String"] if caused_by else [])


def anomaly_events(g: DDL, caused_by: bool = True) -> list[str]:
    return g.table(
        "anomaly_events",
        _anomaly_columns(g.d, caused_by),
        "ReplacingMergeTree",
        "kind, fingerprint, ts_ns, status",
        "toDate(start)",
        shard_key="cityHash64(fingerprint)",
    )


def anomalies_latest(g: DDL, caused_by: bool = True) -> list[str]:
    """Schema v2: one row per incident, its newest event (ReplacingMergeTree on ``ts_ns``), so
    "what is firing now" reads one small table with FINAL instead of grouping every event."""
    out = g.table(
        "anomalies_latest",
        _anomaly_columns(g.d, caused_by),
        "ReplacingMergeTree",
        "kind, fingerprint",
        "toDate(start)",
        version="ts_ns",
        shard_key="cityHash64(fingerprint)",
    )
    out.append(
        g.view("anomalies_latest_mv", "anomalies_latest", f"SELECT * FROM {g.local('anomaly_events')}")
    )
    db = g.o.database
    out.append(f"INSERT INTO {db}.anomalies_latest SELECT * FROM {db}.anomaly_events")
    return out


def anomaly_caused_by(g: DDL) -> list[str]:
    """Schema v6: ``caused_by``, the incident that causes this one (``Anomaly.caused_by``), added
    last to both anomaly tables; the view between them is made again to carry it. Rows stored
    before read it as empty: nothing was linked then."""
    db, cluster = g.o.database, g.on_cluster()
    out = []
    for table in ("anomaly_events", "anomalies_latest"):
        fronts = [g.local(table)] + ([f"{db}.{table}"] if g.o.cluster else [])
        out += [f"ALTER TABLE {front}{cluster}\n    ADD COLUMN caused_by String" for front in fronts]
    select = f"SELECT * FROM {g.local('anomaly_events')}"
    drop = f"DROP TABLE IF EXISTS {db}.anomalies_latest_mv{cluster}"
    return [*out, drop, g.view("anomalies_latest_mv", "anomalies_latest", select)]


def topology(g: DDL) -> list[str]:
    """One row per element per topology snapshot (``topo_ns`` its time): the current fabric is the
    rows of ``max(topo_ns)``, and a removed link disappears with the next snapshot."""
    d = g.d
    head = ["topo_ns UInt64", "ts DateTime('UTC')"]
    tables = {
        "topology_devices": ([f"id {d.lc()}", f"kind {d.lc()}", "pod String", "host String"], "topo_ns, id"),
        "topology_links": (
            [
                f"a_device {d.lc()}",
                "a_port String",
                f"b_device {d.lc()}",
                "b_port String",
                "speed_gbps Float64",
            ],
            "topo_ns, a_device, a_port",
        ),
        "topology_ecmp": (
            ["group_id String", f"device {d.lc()}", "member String", "toward String"],
            "topo_ns, device, group_id, member",
        ),
        "topology_nics": (
            ["host String", "nic String", "nic_port String", f"leaf {d.lc()}", "leaf_port String"],
            "topo_ns, host, nic, nic_port",
        ),
    }
    out: list[str] = []
    for name, (cols, order) in tables.items():
        out += g.table(name, head + cols, "ReplacingMergeTree", order, shard_key="topo_ns")
    return out
