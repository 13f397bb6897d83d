"""Two ways to reach ClickHouse behind one small interface: chdb in process, or a server.

Both take the same SQL text and the same columnar batches (a dict of numpy arrays / lists per
column), so the schema, the sink and the dashboards' queries do not know which one they talk to.

* ``ChdbBackend``: ClickHouse's engine inside this process, persisted under a data directory. chdb
  holds one data directory per process: a second store on another directory is refused with a
  clear error until the first is closed. Batches go in as an Arrow table through the ``Python()``
  table function (measured fastest: ``bench/bench_clickhouse.py``); results come back as Parquet,
  which keeps DateTime columns as timestamps (Arrow output turns them into integers).
* ``ServerBackend``: clickhouse-driver over the native protocol, columnar numpy inserts. The server
  version is read at connect time and decides the DDL dialect.
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

import numpy as np

from fabricwatch.storage.schema import Dialect

Columns = dict[str, Any]
"""Column name → numpy array, ``Labels``, or list (of str, None-able values, lists), equal lengths."""


@dataclass(frozen=True)
class Labels:
    """A string column as codes into its distinct values: no Python string per row on the way in
    (device and port names repeat on every row of a batch)."""

    codes: np.ndarray
    values: list[str]

    def decoded(self) -> np.ndarray:
        return np.array(self.values, dtype=object)[self.codes]


INSERT_SETTINGS: dict[str, int] = {"optimize_on_insert": 0, "parallel_view_processing": 1}
"""Every insert's settings, where the target knows them (measured in ``bench/bench_clickhouse.py``):

* ``optimize_on_insert = 0``: no folding of the inserted block; the rollups are read with
  ``GROUP BY`` anyway and the sink never sends a poll twice. Inserts with views 1.5x faster.
* ``parallel_view_processing = 1``: the rollup views run side by side on the insert's threads.
  Inserts with views 1.2x faster on two cores."""


class StoreError(RuntimeError):
    """ClickHouse could not be reached or refused a statement; the text says which and why."""


class Backend(Protocol):
    dialect: Dialect
    database: str
    where: str

    def execute(self, sql: str) -> None: ...

    def use_database(self) -> None: ...

    def query(self, sql: str) -> list[tuple]: ...

    def insert(self, table: str, columns: Columns) -> None: ...

    def close(self) -> None: ...


_chdb_lock = threading.Lock()
_chdb_open: dict[str, int] = {}


def _refuse_if_held(data_dir: Path) -> None:
    """ClickHouse locks ``status`` in its data directory for as long as a server (a sink, ``run``)
    has it open; chdb then fails with a bare ``Error initializing EmbeddedServer``. Ask the lock
    first, so the error says what holds the store and what to do."""
    status = data_dir / "status"
    if not status.exists():
        return
    with status.open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"the embedded store in {data_dir} is open in another process (a running sink or "
                "`fabricwatch run`): stop it, or read the store through a ClickHouse server, or a copy "
                "of the directory"
            ) from None
        fcntl.flock(f, fcntl.LOCK_UN)


class ChdbBackend:
    """chdb persisted in ``data_dir``; the database is made current so plain table names work."""

    def __init__(self, data_dir: Path, database: str = "fabricwatch") -> None:
        try:
            from chdb import session
        except ImportError:
            raise StoreError("the embedded store needs chdb (pip install chdb)") from None
        self.data_dir = Path(data_dir).resolve()
        self.database = database
        self.where = f"chdb:{self.data_dir}"
        key = str(self.data_dir)
        with _chdb_lock:
            other = next((p for p in _chdb_open if p != key), None)
            if other is not None:
                raise StoreError(
                    f"chdb holds one data directory per process and {other} is open; "
                    f"close that store before opening {key}"
                )
            self.data_dir.mkdir(parents=True, exist_ok=True)
            if key not in _chdb_open:
                _refuse_if_held(self.data_dir)
            try:
                self._session = session.Session(key)
            except Exception as exc:
                raise StoreError(f"cannot open the embedded store in {key}: {exc}") from None
            _chdb_open[key] = _chdb_open.get(key, 0) + 1
        self._closed = False
        self.dialect = Dialect.parse(self._raw("SELECT version()", "CSV").strip().strip('"'))

    def _raw(self, sql: str, fmt: str) -> str:
        try:
            return str(self._session.query(sql, fmt))
        except Exception as exc:
            raise StoreError(f"{self.where}: {_first_line(exc)}\n  in: {_short(sql)}") from None

    def execute(self, sql: str) -> None:
        self._raw(sql, "CSV")

    def use_database(self) -> None:
        self.execute(f"USE {self.database}")

    def query(self, sql: str) -> list[tuple]:
        import pyarrow.parquet as pq

        try:
            result = self._session.query(sql, "Parquet")
        except Exception as exc:
            raise StoreError(f"{self.where}: {_first_line(exc)}\n  in: {_short(sql)}") from None
        data = result.bytes()
        if not data:
            return []
        table = pq.read_table(io.BytesIO(data))
        return list(zip(*(c.to_pylist() for c in table.columns), strict=True))

    def insert(self, table: str, columns: Columns) -> None:
        import pyarrow as pa

        batch = pa.table({name: _arrow(pa, values) for name, values in columns.items()})
        names = ", ".join(columns)
        settings = ", ".join(f"{k} = {v}" for k, v in INSERT_SETTINGS.items())
        sql = f"INSERT INTO {table} ({names}) SETTINGS {settings} SELECT {names} FROM Python(batch)"
        try:
            self._session.query(sql)  # Python(batch) reads the local variable of that name here
        except Exception as exc:
            raise StoreError(f"{self.where}: insert into {table}: {_first_line(exc)}") from None
        finally:
            del batch  # the only use Python code can see

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        key = str(self.data_dir)
        with _chdb_lock:
            _chdb_open[key] -= 1
            if _chdb_open[key] == 0:
                del _chdb_open[key]
                self._session.close()


def _arrow(pa: Any, values: Any) -> Any:
    """A column as Arrow: float NaN becomes NULL (the Nullable columns' unknown), times are UTC,
    labels a dictionary array."""
    if isinstance(values, Labels):
        return pa.DictionaryArray.from_arrays(
            pa.array(values.codes), pa.array(values.values, type=pa.string())
        )
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "f":
            return pa.array(values, mask=np.isnan(values))
        if values.dtype.kind == "M":
            return pa.array(values.astype("datetime64[ns]"), type=pa.timestamp("ns", tz="UTC"))
        return pa.array(values)
    if values and isinstance(values[0], list):  # arrays: typed, or all-empty lists are null
        first = next((x[0] for x in values if x), "")
        return pa.array(values, type=pa.list_(pa.float64() if isinstance(first, float) else pa.string()))
    return pa.array(values)


@dataclass(frozen=True)
class ServerAddress:
    host: str
    port: int
    user: str
    password: str
    database: str

    @classmethod
    def parse(cls, url: str, environ: Mapping[str, str] | None = None) -> ServerAddress:
        """``clickhouse://user:password@host:9000/db`` (user, password, port and db optional). A URL
        without a password takes ``FABRICWATCH_CLICKHOUSE_PASSWORD``'s, so that a daemon's password
        stays out of its command line (``ps`` shows that to every user)."""
        environ = os.environ if environ is None else environ
        u = urlparse(url)
        if u.scheme != "clickhouse" or not u.hostname:
            raise ValueError(
                f"{redact_url(url)}: expected clickhouse://[user[:password]@]host[:port][/database]"
            )
        try:
            port = u.port or 9000
        except ValueError:
            raise ValueError(f"{redact_url(url)}: the port is not a number") from None
        db = u.path.strip("/") or "fabricwatch"
        password = unquote(u.password or "") or environ.get("FABRICWATCH_CLICKHOUSE_PASSWORD", "")
        return cls(u.hostname, port, unquote(u.username or "default"), password, db)

    def __repr__(self) -> str:
        return f"clickhouse://{self.user}@{self.host}:{self.port}/{self.database}"


class ServerBackend:
    """A ClickHouse server over the native protocol (clickhouse-driver, numpy columnar inserts)."""

    def __init__(self, address: ServerAddress, connect_timeout_s: float = 5.0) -> None:
        try:
            from clickhouse_driver import Client
        except ImportError:
            raise StoreError(
                "a ClickHouse server needs clickhouse-driver (pip install clickhouse-driver)"
            ) from None
        self.address = address
        self.database = address.database
        self.where = repr(address)
        self._connect_timeout_s = connect_timeout_s
        self._client_class = Client
        # it logs every refused connection with a traceback; our StoreError says it once, clearly
        logging.getLogger("clickhouse_driver.connection").setLevel(logging.ERROR)
        self._client, version = self._connect("default", numpy=False)
        self._bulk: Any = None
        self._nullable: dict[str, set[str]] = {}
        self.dialect = Dialect.parse(version)
        listed = ", ".join(f"'{name}'" for name in INSERT_SETTINGS)
        known = {r[0] for r in self._run(f"SELECT name FROM system.settings WHERE name IN ({listed})")}
        self._insert_settings = {k: v for k, v in INSERT_SETTINGS.items() if k in known}

    def _connect(self, database: str, numpy: bool) -> tuple[Any, str]:
        a = self.address
        client = self._client_class(
            a.host,
            port=a.port,
            user=a.user,
            password=a.password,
            database=database,
            connect_timeout=self._connect_timeout_s,
            send_receive_timeout=300,
            settings={"use_numpy": numpy},
        )
        try:
            version = client.execute("SELECT version()")[0][0]
        except Exception as exc:
            raise StoreError(f"{self.where}: cannot connect: {_first_line(exc)}") from None
        return client, str(version)

    def use_database(self) -> None:
        self._client.disconnect()
        self._client, _ = self._connect(self.database, numpy=False)

    def execute(self, sql: str) -> None:
        self._run(sql)

    def query(self, sql: str) -> list[tuple]:
        return [tuple(r) for r in self._run(sql)]

    def insert(self, table: str, columns: Columns) -> None:
        """All-numpy batches (the rates) go through a numpy client: no Python object per value.
        Small batches with lists (arrays, nullable times) go through the plain client."""
        names = ", ".join(columns)
        sql = f"INSERT INTO {table} ({names}) VALUES"
        try:
            columns = {n: v.decoded() if isinstance(v, Labels) else v for n, v in columns.items()}
            if all(isinstance(v, np.ndarray) for v in columns.values()):
                if self._bulk is None:
                    self._bulk, _ = self._connect("default", numpy=True)
                nullable = self._nullable_columns(table)
                data = [_nan_as_none(v) if n in nullable else v for n, v in columns.items()]
                self._bulk.execute(sql, data, columnar=True, settings=self._insert_settings)
            else:
                rows = [_plain(v) for v in columns.values()]
                self._client.execute(sql, rows, columnar=True, settings=self._insert_settings)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"{self.where}: insert into {table}: {_first_line(exc)}") from None

    def _nullable_columns(self, table: str) -> set[str]:
        """Nullable columns of ``db.table`` (asked once per table): where a NaN must go as NULL."""
        found = self._nullable.get(table)
        if found is None:
            db, _, name = table.rpartition(".")
            rows = self._run(
                f"SELECT name FROM system.columns WHERE database = '{db or self.database}' "
                f"AND table = '{name}' AND type LIKE 'Nullable(%'"
            )
            found = self._nullable[table] = {r[0] for r in rows}
        return found

    def _run(self, sql: str) -> Any:
        try:
            return self._client.execute(sql)
        except Exception as exc:
            raise StoreError(f"{self.where}: {_first_line(exc)}\n  in: {_short(sql)}") from None

    def close(self) -> None:
        self._client.disconnect()
        if self._bulk is not None:
            self._bulk.disconnect()


def _nan_as_none(values: np.ndarray) -> np.ndarray:
    """clickhouse-driver's numpy columns send NULL only for ``None`` (a NaN would be stored as NaN):
    a float column with NaNs goes as an object array with None there."""
    if values.dtype.kind != "f":
        return values
    missing = np.isnan(values)
    if not missing.any():
        return values
    out = values.astype(object)
    out[missing] = None
    return out


def _plain(values: Any) -> Any:
    """A numpy column as Python values for the plain client (times as UTC datetimes)."""
    if not isinstance(values, np.ndarray):
        return values
    if values.dtype.kind == "M":
        return [
            datetime.fromtimestamp(int(t) / 1e6, UTC)
            for t in values.astype("datetime64[us]").astype(np.int64)
        ]
    return values.tolist()


def open_backend(target: str | Path, database: str = "fabricwatch") -> Backend:
    """A ``clickhouse://`` URL → a server; anything else is a chdb data directory."""
    text = str(target)
    if text.startswith("clickhouse://"):
        return ServerBackend(ServerAddress.parse(text))
    if "://" in text:
        raise ValueError(f"{redact_url(text)}: a store is a directory or a clickhouse:// URL")
    return ChdbBackend(Path(text), database)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "Stack trace" in text:
        text = text[: text.index("Stack trace")]
    return " ".join(text.split())[:500]


def _short(sql: str) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= 160 else flat[:157] + "..."


def redact_url(url: str) -> str:
    u = urlparse(url)
    if u.password:
        return url.replace(f":{u.password}@", ":***@")
    return url


def lit(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
