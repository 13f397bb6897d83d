"""A ClickHouse store: a backend (chdb or a server) with the schema applied at the current version."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Self

import numpy as np

from fabricwatch.schemas.messages import PORT_RATE_COLUMNS
from fabricwatch.storage.backends import Backend, StoreError, open_backend
from fabricwatch.storage.migrations import (
    LATEST_VERSION,
    MIGRATIONS,
    Migration,
    bootstrap_ddl,
    current_ddl,
    migration_ddl,
)
from fabricwatch.storage.schema import SchemaOptions

DEFAULT_DATA_DIR = Path("fabricwatch-data")


class Store:
    """A ClickHouse backend with the fabricwatch schema: open it, query it, hand it to a Sink."""

    def __init__(self, backend: Backend, options: SchemaOptions) -> None:
        self.backend = backend
        self.options = options

    @classmethod
    def open(
        cls,
        target: str | Path = DEFAULT_DATA_DIR,
        database: str = "fabricwatch",
        cluster: str | None = None,
        apply_schema: bool = True,
    ) -> Store:
        """``target``: a chdb data directory or ``clickhouse://user:pass@host:9000/db`` (the URL's
        database wins over ``database``). The schema is applied (a no-op when current) unless told not."""
        backend = open_backend(target, database)
        try:
            store = cls(backend, SchemaOptions(database=backend.database, cluster=cluster))
            if apply_schema:
                store.apply_schema()
            elif store.schema_version() > 0:
                backend.use_database()
        except BaseException:
            backend.close()
            raise
        return store

    @property
    def where(self) -> str:
        return self.backend.where

    @property
    def database(self) -> str:
        return self.options.database

    def schema_version(self) -> int:
        """The newest migration applied (0 for an empty database)."""
        db = self.options.database
        if not self.backend.query(
            f"SELECT name FROM system.tables WHERE database = '{db}' AND name = 'schema_version'"
        ):
            return 0
        rows = self.backend.query(f"SELECT max(version) FROM {db}.schema_version")
        return int(rows[0][0] or 0) if rows else 0

    def apply_schema(self, upto: int | None = None) -> list[int]:
        """Create or upgrade in place to ``upto`` (default: the newest); return the versions applied."""
        if upto is not None and not 1 <= upto <= LATEST_VERSION:
            raise ValueError(f"schema version {upto}: this build knows 1 to {LATEST_VERSION}")
        for sql in bootstrap_ddl(self.backend.dialect, self.options):
            self.backend.execute(sql)
        current = self.schema_version()
        if current > LATEST_VERSION:
            raise StoreError(
                f"{self.where}: the database is at schema version {current}, newer than this build's "
                f"{LATEST_VERSION}: use a newer fabricwatch"
            )
        if upto is not None and current > upto:
            raise ValueError(f"the database is at schema version {current}, newer than {upto}")
        if current == 0 and upto in (None, LATEST_VERSION):
            # A new store is created at the current version directly; every version is recorded.
            for sql in current_ddl(self.backend.dialect, self.options):
                self.backend.execute(sql)
            self._record(list(MIGRATIONS))
            self.backend.use_database()
            return [m.version for m in MIGRATIONS]
        applied = []
        for migration, statements in migration_ddl(self.backend.dialect, self.options, current, upto):
            for sql in statements:
                self.backend.execute(sql)
            self._record([migration])
            applied.append(migration.version)
        self.backend.use_database()
        return applied

    def rate_metrics(self) -> tuple[str, ...]:
        """The metrics ``rates_raw`` has here, in ``PORT_RATE_COLUMNS`` order: all of them at the
        newest schema, fewer in a database kept at an older version (``apply_schema(upto=...)``)."""
        have = self.table_columns("rates_raw")
        return tuple(m for m in PORT_RATE_COLUMNS if m in have)

    def table_columns(self, table: str) -> frozenset[str]:
        """The columns a table has here: a database kept at an older version lacks the newer ones,
        which a sink then leaves out rather than failing every insert."""
        rows = self.backend.query(
            f"SELECT name FROM system.columns WHERE database = '{self.options.database}' "
            f"AND table = '{table}'"
        )
        return frozenset(r[0] for r in rows)

    def _record(self, migrations: list[Migration]) -> None:
        self.backend.insert(
            f"{self.options.database}.schema_version",
            {
                "version": np.array([m.version for m in migrations], dtype=np.uint32),
                "applied": np.array([np.datetime64(int(time.time()), "s")] * len(migrations)),
                "description": [m.description for m in migrations],
            },
        )

    def query(self, sql: str) -> list[tuple]:
        """Rows of a SELECT as tuples (DateTime columns as timezone-aware datetimes)."""
        return self.backend.query(sql)

    def execute(self, sql: str) -> None:
        self.backend.execute(sql)

    def table(self, name: str) -> str:
        return f"{self.options.database}.{name}"

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
