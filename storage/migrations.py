"""Versioned migrations of the ClickHouse schema.

``MIGRATIONS`` is an ordered list; ``schema_version`` records what was applied, so applying twice
changes nothing and a newer build upgrades an older database in place. A migration is never edited
once released: a change is a new migration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fabricwatch.storage.job_tables import (
    burst_profiles,
    collective_calls,
    comm_graph,
    job_steps,
    nic_periods,
    phases,
)
from fabricwatch.storage.schema import (
    DDL,
    METRICS_V1,
    ROLLUPS,
    Dialect,
    SchemaOptions,
    anomalies_latest,
    anomaly_caused_by,
    anomaly_events,
    device_latest,
    metrics_v4,
    rates_raw,
    rollup_table,
    rollup_v1,
    rollup_view,
    rollups_v3,
    topology,
)


def _v1(g: DDL) -> list[str]:
    out = rates_raw(g, METRICS_V1)
    for name in ROLLUPS:
        out += rollup_v1(g, name)
    return out + device_latest(g) + anomaly_events(g, caused_by=False) + phases(g) + topology(g)


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: Callable[[DDL], list[str]]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "rates_raw, rollups 10s/1m/1h, device_latest, anomaly_events, phases, topology", _v1),
    Migration(
        2,
        "anomalies_latest: newest event per incident, backfilled",
        lambda g: anomalies_latest(g, caused_by=False),
    ),
    Migration(3, "rollups as plain sums, counts and maxima, each view reading raw rows", rollups_v3),
    Migration(4, "link health, drops, PG watermarks and PFC watchdog metrics", metrics_v4),
    Migration(5, "comm_edges, comm_ranks: each job's communication graph", comm_graph),
    Migration(6, "anomalies: caused_by, the incident that causes this one", anomaly_caused_by),
    Migration(
        7, "collective_calls: each timed collective call of a job, with its bandwidths", collective_calls
    ),
    Migration(8, "job_steps: each training step of a job's ranks, with its time in collectives", job_steps),
    Migration(
        9,
        "nic_periods, burst_profiles: each NIC's traffic period at each rhythm judgment, burst captures",
        lambda g: nic_periods(g) + burst_profiles(g),
    ),
)
LATEST_VERSION = MIGRATIONS[-1].version


def bootstrap_ddl(dialect: Dialect, opts: SchemaOptions) -> list[str]:
    """The database and the ``schema_version`` ledger, created before any migration."""
    g = DDL(dialect, opts)
    db = f"CREATE DATABASE IF NOT EXISTS {opts.database}{g.on_cluster()}"
    cols = ["version UInt32", "applied DateTime('UTC')", "description String"]
    ledger = g.table("schema_version", cols, "ReplacingMergeTree", "version", shard_key="version")
    return [db, *ledger]


def migration_ddl(
    dialect: Dialect, opts: SchemaOptions, after: int = 0, upto: int | None = None
) -> list[tuple[Migration, list[str]]]:
    """Migrations newer than ``after`` (up to ``upto``), each with its statements for this target."""
    g = DDL(dialect, opts)
    last = LATEST_VERSION if upto is None else upto
    return [(m, m.statements(g)) for m in MIGRATIONS if after < m.version <= last]


def current_ddl(dialect: Dialect, opts: SchemaOptions) -> list[str]:
    """A new database at ``LATEST_VERSION``, built directly: the tables the migrations leave, without
    creating the v1 rollups only to replace them (a new store has nothing to migrate)."""
    g = DDL(dialect, opts)
    out = rates_raw(g)
    for name in ROLLUPS:
        out += [*rollup_table(g, name, name), rollup_view(g, name)]
    tail = phases(g) + topology(g) + anomalies_latest(g) + comm_graph(g) + collective_calls(g) + job_steps(g)
    tail += nic_periods(g) + burst_profiles(g)
    return out + device_latest(g) + anomaly_events(g) + tail


def full_ddl(dialect: Dialect, opts: SchemaOptions | None = None) -> list[str]:
    """Every statement for a new database, in order (what ``fabricwatch schema`` prints)."""
    opts = opts or SchemaOptions()
    return bootstrap_ddl(dialect, opts) + current_ddl(dialect, opts)
