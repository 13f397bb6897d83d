"""Batched, exactly-once-in-effect writes of rates, anomalies, phases and topology into ClickHouse.

``Store`` is a backend (chdb or a server) with the schema applied. ``Sink`` buffers messages and
inserts them in columnar batches bounded by rows and by age (``docs/storage.md`` has the figures
behind the defaults). Nothing is dropped on failure: ``flush`` raises and keeps the batch, and the
caller (the Kafka consumer) retries with backoff and commits offsets only after a flush succeeds.

Redelivery (a crash after an insert but before the offset commit) must not count twice in the
rollups, which materialized views compute from each inserted block. Rather than rely on insert
deduplication (non-replicated tables on old servers have none, and a redelivered batch need not
have the same boundaries), the sink never inserts a poll that is already stored. A device's rates
are strictly increasing in time (stage 1 drops late and duplicate snapshots; a device stays on one
Kafka partition), so per device the sink only needs where its stored data ends (``device_latest``,
read once per device and then kept in memory): a poll at or before that is a redelivery and is
skipped. This holds whatever the raw table's TTL has removed since, and costs nothing per row.
The same key-check keeps anomaly events, phases and topology snapshots from being stored twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import numpy as np

from fabricwatch.schemas.messages import (
    PORT_RATE_COLUMNS,
    Anomaly,
    BurstProfile,
    Collectives,
    CommGraph,
    Periods,
    Phase,
    PortRates,
    RatesBatch,
    Steps,
    Topology,
)
from fabricwatch.storage.backends import Labels, StoreError, lit
from fabricwatch.storage.columns import (
    Interner,
    anomaly_columns,
    call_columns,
    edge_columns,
    period_columns,
    phase_columns,
    profile_columns,
    rank_columns,
    step_columns,
    topology_columns,
)
from fabricwatch.storage.store import Store

DEFAULT_MAX_ROWS = 200_000
DEFAULT_MAX_DELAY_S = 5.0
RANKS_REMEMBERED = 100_000
"""(job, communicator, rank, host) rows already buffered or stored: every phase repeats its rank map,
and storing it once is enough. Past this the memory starts again (the table merges repeats)."""


@dataclass
class SinkStats:
    flushes: int = 0
    failures: int = 0
    rate_rows: int = 0
    rate_rows_skipped: int = 0
    anomalies: int = 0
    phases: int = 0
    collective_calls: int = 0
    job_steps: int = 0
    periods: int = 0
    burst_profiles: int = 0
    graph_edges: int = 0
    topologies: int = 0
    duplicates_skipped: int = 0
    insert_s: float = 0.0
    last_error: str = ""


@dataclass
class _RatesBuffer:
    messages: list[tuple[str, str, int, float, list[str], np.ndarray]] = field(default_factory=list)
    rows: int = 0


class Sink:
    """Buffers messages; ``flush`` inserts them. ``due()`` says when a batch is full (``max_rows``)
    or its oldest message has waited ``max_delay_s``; ``maybe_flush`` flushes then.

    Not thread-safe: one sink per consumer loop or pipeline.
    """

    def __init__(
        self,
        store: Store,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_delay_s: float = DEFAULT_MAX_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        if max_delay_s <= 0:
            raise ValueError("max_delay_s must be positive")
        self.store = store
        self.max_rows = max_rows
        self.max_delay_s = max_delay_s
        self.stats = SinkStats()
        self._clock = clock
        self._first_at: float | None = None
        self._rates = _RatesBuffer()
        self._anomalies: list[Anomaly] = []
        self._phases: list[Phase] = []
        self._calls: list[Collectives] = []
        self._steps: list[Steps] = []
        self._periods: list[Periods] = []
        self._profiles: list[BurstProfile] = []
        self._graphs: list[CommGraph] = []
        self._ranks: list[tuple[str, str, int, str, int]] = []
        self._ranks_seen: set[tuple[str, str, int, str]] = set()
        self._topologies: list[Topology] = []
        self._stored_until: dict[str, int] = {}
        self._devices, self._kinds, self._ports = Interner(), Interner(), Interner()
        self._col_maps: dict[tuple[str, ...], np.ndarray] = {}
        self._stored_metrics: list[tuple[int, str]] | None = None
        self._anomaly_fields: frozenset[str] | None = None

    # --- buffering -------------------------------------------------------------------------------

    def add(
        self,
        msg: PortRates
        | RatesBatch
        | Anomaly
        | Phase
        | CommGraph
        | Collectives
        | Steps
        | Periods
        | BurstProfile
        | Topology,
    ) -> None:
        """Any message the store keeps, to its table."""
        if isinstance(msg, PortRates):
            self.add_rates(msg)
        elif isinstance(msg, RatesBatch):
            self.add_rates_batch(msg)
        elif isinstance(msg, Anomaly):
            self.add_anomaly(msg)
        elif isinstance(msg, Phase):
            self.add_phase(msg)
        elif isinstance(msg, CommGraph):
            self.add_graph(msg)
        elif isinstance(msg, Collectives):
            self.add_calls(msg)
        elif isinstance(msg, Steps):
            self.add_steps(msg)
        elif isinstance(msg, Periods):
            self.add_periods(msg)
        elif isinstance(msg, BurstProfile):
            self.add_profile(msg)
        else:
            self.add_topology(msg)

    def add_rates(self, msg: PortRates) -> None:
        values = msg.matrix()
        if tuple(msg.columns) != PORT_RATE_COLUMNS:
            values = self._to_standard_columns(msg.columns, values)
        self._rates.messages.append((msg.device, msg.device_kind, msg.ts_ns, msg.dt_s, msg.ports, values))
        self._rates.rows += len(msg.ports)
        self._touch()

    def add_rates_batch(self, msg: RatesBatch) -> None:
        """Each device's rows as a view of the batch's one matrix: no copy until the insert."""
        values = msg.matrix()
        if tuple(msg.columns) != PORT_RATE_COLUMNS:
            values = self._to_standard_columns(msg.columns, values)
        self._rates.messages += msg.per_device(values)
        self._rates.rows += len(msg.ports)
        self._touch()

    def add_anomaly(self, msg: Anomaly) -> None:
        self._anomalies.append(msg)
        self._touch()

    def add_phase(self, msg: Phase) -> None:
        self._phases.append(msg)
        self._add_ranks(msg.job, msg.comm, msg.rank_hosts, msg.begin_ns)
        self._touch()

    def add_graph(self, msg: CommGraph) -> None:
        self._graphs.append(msg)
        self._add_ranks(msg.job, msg.comm, msg.rank_hosts, msg.ts_ns)
        self._touch()

    def add_calls(self, msg: Collectives) -> None:
        self._calls.append(msg)
        self._add_ranks(msg.job, msg.comm, msg.rank_hosts, msg.ts_ns)
        self._touch()

    def add_steps(self, msg: Steps) -> None:
        self._steps.append(msg)
        self._touch()

    def add_periods(self, msg: Periods) -> None:
        self._periods.append(msg)
        self._touch()

    def add_profile(self, msg: BurstProfile) -> None:
        self._profiles.append(msg)
        self._touch()

    def _add_ranks(self, job: str, comm: str, rank_hosts: dict[int, str], ts_ns: int) -> None:
        if len(self._ranks_seen) > RANKS_REMEMBERED:
            self._ranks_seen.clear()
        for rank, host in rank_hosts.items():
            key = (job, comm, rank, host)
            if key not in self._ranks_seen:
                self._ranks_seen.add(key)
                self._ranks.append((job, comm, rank, host, ts_ns))

    def add_topology(self, msg: Topology) -> None:
        self._topologies.append(msg)
        self._touch()

    @property
    def pending_rows(self) -> int:
        graphs = len(self._graphs) + len(self._ranks) + sum(len(m.calls) for m in self._calls)
        graphs += sum(len(m.steps) for m in self._steps) + sum(len(m.devices) for m in self._periods)
        graphs += len(self._profiles)
        return self._rates.rows + len(self._anomalies) + len(self._phases) + graphs + len(self._topologies)

    def due(self) -> bool:
        if self._first_at is None:
            return False
        return self.pending_rows >= self.max_rows or self._clock() - self._first_at >= self.max_delay_s

    def maybe_flush(self) -> bool:
        """Flush when due; True when it did."""
        if not self.due():
            return False
        self.flush()
        return True

    def _touch(self) -> None:
        if self._first_at is None:
            self._first_at = self._clock()

    def _to_standard_columns(self, columns: list[str], values: np.ndarray) -> np.ndarray:
        """A message with other columns than ours (stage 1 sends only those its devices' counters
        feed; another build may know other columns): its columns by name; ours it lacks are
        unknown (NaN)."""
        key = tuple(columns)
        index = self._col_maps.get(key)
        if index is None:
            pos = {c: i for i, c in enumerate(columns)}
            index = self._col_maps[key] = np.array([pos.get(c, -1) for c in PORT_RATE_COLUMNS])
        out = np.full((values.shape[0], len(PORT_RATE_COLUMNS)), np.nan)
        have = index >= 0
        out[:, have] = values[:, index[have]]
        return out

    # --- writing ---------------------------------------------------------------------------------

    def flush(self) -> None:
        """Insert everything buffered; on failure raise StoreError and keep the buffer for a retry.

        Each kind is cleared from the buffer once inserted, so a retry does not repeat it (and if it
        did, the key checks would skip it)."""
        if self._first_at is None:
            return
        started = time.perf_counter()
        try:
            if self._topologies:
                self._insert_topologies()
                self._topologies = []
            if self._phases:
                self._insert_phases()
                self._phases = []
            if self._graphs or self._ranks:
                self._insert_graphs()
            if self._calls:
                self._insert_calls()
            if self._steps:
                self._insert_steps()
            if self._periods:
                self._insert_periods()
            if self._profiles:
                self.store.backend.insert(self.store.table("burst_profiles"), profile_columns(self._profiles))
                self.stats.burst_profiles += len(self._profiles)
                self._profiles = []
            if self._rates.messages:
                self._insert_rates()
                self._rates = _RatesBuffer()
            if self._anomalies:
                self._insert_anomalies()
                self._anomalies = []
        except StoreError as exc:
            self.stats.failures += 1
            self.stats.last_error = str(exc)
            raise
        self._first_at = None
        self.stats.flushes += 1
        self.stats.insert_s += time.perf_counter() - started

    def discard(self) -> None:
        """Drop what is buffered (its records were not committed: another consumer reads them)."""
        self._rates = _RatesBuffer()
        self._anomalies, self._phases, self._topologies = [], [], []
        self._graphs, self._ranks, self._calls, self._steps = [], [], [], []
        self._periods, self._profiles = [], []
        self._ranks_seen.clear()
        self._first_at = None

    def forget_positions(self) -> None:
        """Re-read where each device's stored data ends before the next insert (after a rebalance
        another consumer may have stored some of this consumer's devices)."""
        self._stored_until.clear()

    def close(self) -> None:
        """Flush what is left (raises if it cannot be stored)."""
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()

    def _insert_rates(self) -> None:
        msgs, until = self._new_polls(self._rates.messages)
        skipped = self._rates.rows - sum(len(m[4]) for m in msgs)
        self.stats.rate_rows_skipped += skipped
        if not msgs:
            return
        counts = np.fromiter((len(m[4]) for m in msgs), dtype=np.int64, count=len(msgs))
        ts_ns = np.repeat(np.fromiter((m[2] for m in msgs), dtype=np.uint64, count=len(msgs)), counts)
        values = np.concatenate([m[5] for m in msgs]) if len(msgs) > 1 else msgs[0][5]
        by_metric = values.T.copy()  # one contiguous array per column, in one copy
        devices = self._devices.codes([m[0] for m in msgs])
        kinds = self._kinds.codes([m[1] for m in msgs])
        ports = np.concatenate([self._ports.codes_of_list(m[4]) for m in msgs])
        columns: dict[str, Any] = {
            "ts": ts_ns.astype("datetime64[ns]"),
            "ts_ns": ts_ns,
            "device": Labels(np.repeat(devices, counts), self._devices.values),
            "device_kind": Labels(np.repeat(kinds, counts), self._kinds.values),
            "port": Labels(ports, self._ports.values),
            "dt_s": np.repeat(np.fromiter((m[3] for m in msgs), dtype=np.float32, count=len(msgs)), counts),
        }
        if self._stored_metrics is None:
            have = set(self.store.rate_metrics())
            self._stored_metrics = [(j, m) for j, m in enumerate(PORT_RATE_COLUMNS) if m in have]
        for j, name in self._stored_metrics:
            columns[name] = by_metric[j]
        self.store.backend.insert(self.store.table("rates_raw"), columns)
        self.stats.rate_rows += len(ts_ns)
        self._stored_until = until

    def _new_polls(self, msgs: list) -> tuple[list, dict[str, int]]:
        """The buffered polls not stored yet, and where each device's data will then end.

        A device's rates are strictly increasing in time (stage 1 drops late and duplicate
        snapshots, and a device stays on one partition), so a poll at or before the newest stored
        one is a redelivery, whatever the raw table's TTL has since removed."""
        unknown = sorted({m[0] for m in msgs} - self._stored_until.keys())
        if unknown:
            listed = ", ".join(lit(d) for d in unknown)
            rows = self.store.query(
                f"SELECT device, max(ts_ns) FROM {self.store.table('device_latest')} "
                f"WHERE device IN ({listed}) GROUP BY device"
            )
            found = {d: int(t) for d, t in rows}
            for d in unknown:
                self._stored_until[d] = found.get(d, 0)
        until = dict(self._stored_until)
        out = []
        for m in msgs:
            if m[2] > until[m[0]]:
                until[m[0]] = m[2]
                out.append(m)
        return out, until

    def _insert_anomalies(self) -> None:
        fps = ", ".join(sorted({lit(a.fingerprint) for a in self._anomalies}))
        stored = {
            (f, int(t), s)
            for f, t, s in self.store.query(
                f"SELECT fingerprint, ts_ns, status FROM {self.store.table('anomaly_events')} "
                f"WHERE fingerprint IN ({fps})"
            )
        }
        new: list[Anomaly] = []
        for a in self._anomalies:
            key = (a.fingerprint, a.ts_ns, a.status)
            if key not in stored:
                stored.add(key)
                new.append(a)
        self.stats.duplicates_skipped += len(self._anomalies) - len(new)
        if not new:
            return
        if self._anomaly_fields is None:
            self._anomaly_fields = self.store.table_columns("anomaly_events")
        columns = {k: v for k, v in anomaly_columns(new).items() if k in self._anomaly_fields}
        self.store.backend.insert(self.store.table("anomaly_events"), columns)
        self.stats.anomalies += len(new)

    def _insert_phases(self) -> None:
        jobs = ", ".join(sorted({lit(p.job) for p in self._phases}))
        stored = {
            (j, c, o, int(b), int(e))
            for j, c, o, b, e in self.store.query(
                f"SELECT job, comm, op, begin_ns, end_ns FROM {self.store.table('phases')} "
                f"WHERE job IN ({jobs})"
            )
        }
        new: list[Phase] = []
        for p in self._phases:
            key = (p.job, p.comm, p.op, p.begin_ns, p.end_ns or 0)
            if key not in stored:
                stored.add(key)
                new.append(p)
        self.stats.duplicates_skipped += len(self._phases) - len(new)
        if not new:
            return
        columns = phase_columns(new)
        self.store.backend.insert(self.store.table("phases"), columns)
        self.stats.phases += len(new)

    def _insert_graphs(self) -> None:
        """Edges and rank rows as they come: the tables merge repeats (a graph re-read after a
        restart), and every reader takes DISTINCT rows, so no key check is needed first."""
        if self._graphs:
            self.store.backend.insert(self.store.table("comm_edges"), edge_columns(self._graphs))
            self.stats.graph_edges += sum(len(g.edges) for g in self._graphs)
            self._graphs = []
        if self._ranks:
            self.store.backend.insert(self.store.table("comm_ranks"), rank_columns(self._ranks))
            self._ranks = []

    def _insert_calls(self) -> None:
        """Calls as they come, like edges: the table merges a call stored twice."""
        self.store.backend.insert(self.store.table("collective_calls"), call_columns(self._calls))
        self.stats.collective_calls += sum(len(m.calls) for m in self._calls)
        self._calls = []

    def _insert_steps(self) -> None:
        self.store.backend.insert(self.store.table("job_steps"), step_columns(self._steps))
        self.stats.job_steps += sum(len(m.steps) for m in self._steps)
        self._steps = []

    def _insert_periods(self) -> None:
        """As they come: the table merges a judgment stored twice."""
        self.store.backend.insert(self.store.table("nic_periods"), period_columns(self._periods))
        self.stats.periods += sum(len(m.devices) for m in self._periods)
        self._periods = []

    def _insert_topologies(self) -> None:
        times = ", ".join(str(t.ts_ns) for t in self._topologies)
        stored = {
            int(r[0])
            for r in self.store.query(
                f"SELECT DISTINCT topo_ns FROM {self.store.table('topology_devices')} "
                f"WHERE topo_ns IN ({times})"
            )
        }
        for topo in self._topologies:
            if topo.ts_ns in stored:
                self.stats.duplicates_skipped += 1
                continue
            stored.add(topo.ts_ns)
            self._insert_topology(topo)
            self.stats.topologies += 1

    def _insert_topology(self, topo: Topology) -> None:
        """Devices last: they are what the duplicate check reads, so a snapshot half-written
        before a failure is written again in full on the retry (its other tables are Replacing)."""
        parts = topology_columns(topo)
        for table, cols in parts.items():
            n = len(next(iter(cols.values())))
            if n == 0:
                continue
            head = {
                "topo_ns": np.full(n, topo.ts_ns, dtype=np.uint64),
                "ts": np.full(n, topo.ts_ns // 1_000_000_000, dtype="datetime64[s]"),
            }
            self.store.backend.insert(self.store.table(table), head | cols)
