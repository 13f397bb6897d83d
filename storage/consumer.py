"""``fabricwatch sink``: Kafka topics → ClickHouse, committing offsets only after a successful insert.

A plain kafka-python consumer rather than a Faust agent, because the guarantee is about ordering
two side effects: insert the batch, *then* commit its offsets. Faust commits on its own schedule
(``broker_commit_every``/``_interval``) once an event is acknowledged by the agent, which does not
wait for an external batch insert; here the loop owns both, so a crash at any point leaves either
nothing committed (the batch is redelivered and the sink skips what was stored) or everything.

When ClickHouse is down the batch stays in memory, the assigned partitions are paused (Kafka holds
the backlog; polling continues so the group membership stays alive), and the insert is retried with
exponential backoff. On a rebalance the buffer is flushed and committed if it can be, and dropped
uncommitted if it cannot: the partitions' next owner reads those records again.

When the broker is away, kafka-python reconnects by itself and a commit that fails is logged and
tried again with the next batch. When it comes back as a new log (``streams/epochs.py``: an
embedded broker restarted), what is buffered is stored, its offsets (positions in the old log) are
not committed, and every partition is read again from its beginning; the sink skips polls it has
already stored, so nothing is stored twice and nothing the new log holds is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    Anomaly,
    BurstProfile,
    DecodeError,
    Periods,
    PhaseMessage,
    PortRates,
    RatesBatch,
    Topology,
    decode,
)
from fabricwatch.storage.backends import StoreError, redact_url
from fabricwatch.storage.sink import DEFAULT_MAX_DELAY_S, DEFAULT_MAX_ROWS, Sink, SinkStats
from fabricwatch.storage.store import Store
from fabricwatch.streams.daemon_metrics import DaemonMetrics
from fabricwatch.streams.epochs import METADATA_MAX_AGE_MS, LogEpochs
from fabricwatch.streams.kafka_io import BrokerSettings
from fabricwatch.streams.trouble import Trouble

log = logging.getLogger(__name__)

_JOIN_GRACE_S = 60.0
"""How long ``idle_exit_s`` waits for partitions to be assigned before it starts counting anyway."""

SINK_TOPICS = {
    topics.RATES: PortRates | RatesBatch,
    topics.ANOMALIES: Anomaly,
    topics.PHASES: PhaseMessage,
    topics.TOPOLOGY: Topology,
    topics.RHYTHM: Periods,
    topics.BURSTS: BurstProfile,
}


@dataclass
class ConsumerStats:
    records: int = 0
    malformed: int = 0
    commits: int = 0
    retries: int = 0
    dropped_on_rebalance: int = 0
    commit_failures: int = 0
    new_logs: int = 0
    last_error: str = ""


@dataclass
class Backoff:
    """Exponential retry delays: ``first_s``, doubling, capped at ``max_s``."""

    first_s: float = 0.5
    max_s: float = 30.0

    def delays(self) -> Any:
        delay = self.first_s
        while True:
            yield delay
            delay = min(delay * 2, self.max_s)


LAG_EVERY_S = 5.0
"""How often the sink measures its lag (one request to the broker)."""


class StoreConsumer:
    """One consumer-group member that stores ``SINK_TOPICS`` through a ``Sink``."""

    def __init__(
        self,
        settings: BrokerSettings,
        store: Store,
        group_id: str = "fabricwatch-sink",
        max_rows: int = DEFAULT_MAX_ROWS,
        max_delay_s: float = DEFAULT_MAX_DELAY_S,
        backoff: Backoff | None = None,
        consumer_options: dict[str, Any] | None = None,
    ) -> None:
        from kafka import KafkaConsumer

        self.sink = Sink(store, max_rows=max_rows, max_delay_s=max_delay_s)
        self.trouble = Trouble(f"store {store.where}", log)
        self.stats = ConsumerStats()
        self.backoff = backoff or Backoff()
        self._pending: dict[Any, int] = {}
        self.turned_at = time.monotonic()
        """When the loop last turned: ``/healthz`` says whether it still does."""
        self.lag: int | None = None
        """Records on its partitions not yet read, as last measured (None: not yet known)."""
        self._lag_at = 0.0
        self._consumer = KafkaConsumer(
            **settings.kafka_kwargs(),
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            **(consumer_options or {}),
        )
        self._epochs = LogEpochs(self._consumer, "sink")
        try:
            self._consumer.subscribe(list(SINK_TOPICS), listener=_rebalance_listener(self))
        except BaseException:
            self._consumer.close(autocommit=False)
            raise

    @property
    def sink_stats(self) -> SinkStats:
        return self.sink.stats

    def run(
        self,
        stop: threading.Event | None = None,
        idle_exit_s: float | None = None,
        max_records: int | None = None,
    ) -> ConsumerStats:
        """Consume until ``stop`` is set, ``idle_exit_s`` pass without a record, or ``max_records``
        records were taken; then store and commit what is buffered and leave the group."""
        stop = stop or threading.Event()
        started = last_record = time.monotonic()
        try:
            while not stop.is_set():
                taken = self.poll_once()
                now = self.turned_at = time.monotonic()
                if now - self._lag_at >= LAG_EVERY_S:
                    self._measure_lag(now)
                if taken or (not self._consumer.assignment() and now - started < _JOIN_GRACE_S):
                    last_record = now  # idle counts from the group join, which can take seconds
                if self.sink.due() or (self._pending and self.sink.pending_rows == 0):
                    self.store_and_commit(stop)
                if max_records is not None and self.stats.records >= max_records:
                    break
                if idle_exit_s is not None and time.monotonic() - last_record >= idle_exit_s:
                    break
            self.store_and_commit(stop)
        finally:
            self._consumer.close(autocommit=False)
        return self.stats

    def close(self) -> None:
        """Leave the group without running (what ``run`` does at its end)."""
        self._consumer.close(autocommit=False)

    def _measure_lag(self, now: float) -> None:
        """The records waiting on its partitions (the broker's ends less its positions)."""
        from kafka.errors import KafkaError

        self._lag_at = now
        lag = 0
        try:
            for tp in self._consumer.assignment():
                end = self._consumer.highwater(tp)  # from the last fetch: no request, no wait
                position = self._consumer.position(tp, timeout_ms=200)
                if end is None or position is None:
                    self.lag = None  # not fetched yet: unknown, never 0 by mistake
                    return
                lag += max(0, end - position)
        except KafkaError:  # a rebalance or the broker away: the lag is unknown until the next try
            self.lag = None
            return
        self.lag = lag

    def poll_once(self, timeout_ms: int = 200) -> int:
        """Take one poll's records into the sink; return how many."""
        taken = 0
        polled = self._consumer.poll(timeout_ms=timeout_ms)
        if self._epochs.changed():  # these records are read again from the new log's beginning
            self._pending.clear()
            self.stats.new_logs += 1
            return 0
        for tp, records in polled.items():
            expected = SINK_TOPICS[tp.topic]
            for rec in records:
                taken += 1
                self._add(expected, rec)
            self._pending[tp] = records[-1].offset + 1
        self.stats.records += taken
        return taken

    def _add(self, expected: type, rec: Any) -> None:
        try:
            msg = decode(rec.value, expected)
        except DecodeError as exc:
            self.stats.malformed += 1
            log.warning("%s[%d]@%d: malformed record skipped: %s", rec.topic, rec.partition, rec.offset, exc)
            return
        self.sink.add(msg)

    def store_and_commit(self, stop: threading.Event | None = None) -> bool:
        """Flush with retries (partitions paused meanwhile), then commit; False if stopped first."""
        delays = self.backoff.delays()
        paused = False
        try:
            while True:
                rows = self.sink.pending_rows
                try:
                    self.sink.flush()
                    self.trouble.ok(f"{rows:,} rows stored")
                    break
                except StoreError as exc:
                    self.stats.retries += 1
                    self.stats.last_error = str(exc)
                    delay = next(delays)
                    self.trouble.failed(str(exc), f"{rows:,} rows (the rest waits in Kafka)")
                    if not paused:
                        self._consumer.pause(*self._consumer.assignment())
                        paused = True
                    if not self._wait(delay, stop):
                        return False
        finally:
            if paused:
                self._consumer.resume(*self._consumer.paused())
        self._commit()
        return True

    def _wait(self, delay_s: float, stop: threading.Event | None) -> bool:
        """Sleep while keeping the group membership alive (polls of paused partitions return nothing)."""
        deadline = time.monotonic() + delay_s
        while time.monotonic() < deadline:
            self.turned_at = time.monotonic()  # waiting out an outage is alive: /healthz says so
            if stop is not None and stop.is_set():
                return False
            self._consumer.poll(timeout_ms=int(min(0.2, max(0.0, deadline - time.monotonic())) * 1000))
        return True

    def _commit(self) -> None:
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        if not self._pending:
            return
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in self._pending.items()}
        try:
            self._consumer.commit(offsets)
        except KafkaError as exc:  # the broker away or a rebalance under way: the next commit covers these
            self.stats.commit_failures += 1
            self.stats.last_error = f"commit: {exc}"
            log.warning(
                "commit of %d partitions' offsets failed (tried again with the next batch): %s",
                len(offsets),
                exc,
            )
            return
        self._pending.clear()
        self.stats.commits += 1

    def _on_revoked(self) -> None:
        """Store and commit what was read; whatever cannot be is left to the partitions' next owner
        (uncommitted records are read again, and polls already stored are skipped)."""
        try:
            self.sink.flush()
            self._commit()
        except Exception as exc:  # store down, or kafka-python refusing a blocking call here
            self.stats.dropped_on_rebalance += self.sink.pending_rows
            self.stats.last_error = f"rebalance: {exc}"
            self.sink.discard()
        self._pending.clear()
        self.sink.forget_positions()


def _rebalance_listener(owner: StoreConsumer) -> Any:
    """A kafka-python ConsumerRebalanceListener (it insists on the class) calling back ``owner``."""
    from kafka import ConsumerRebalanceListener

    class Rebalance(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            owner._on_revoked()

        def on_partitions_assigned(self, assigned: Any) -> None:
            owner.sink.forget_positions()

    return Rebalance()


def open_store(target: str | Path, stop: threading.Event, backoff: Backoff | None = None) -> Store | None:
    """The store, waited for while it cannot be opened (a ClickHouse server still starting, or
    away), as the running sink waits out an outage: said when it begins and ends, retried with
    backoff; None when ``stop`` comes first. A bad target (a typo in the URL) fails the same way a
    down server does, so the log line names the target and the error."""
    trouble = Trouble(f"store {redact_url(str(target))}", log)
    for delay in (backoff or Backoff()).delays():
        try:
            store = Store.open(target)
        except StoreError as exc:
            trouble.failed(f"cannot open: {exc}", "what the sink reads (it stays in Kafka)")
            if stop.wait(delay):
                return None
            continue
        trouble.ok("opened")
        return store
    return None


def sink_metrics(consumer: StoreConsumer) -> DaemonMetrics:
    """The sink's ``/metrics`` and ``/healthz``: what it read, stored, retried and lost, its lag and
    the rows it holds, read from ``consumer`` at scrape time."""

    def counters() -> dict[str, float]:
        c, s = consumer.stats, consumer.sink_stats
        return {
            "records": c.records,
            "malformed_records": c.malformed,
            "commits": c.commits,
            "commit_failures": c.commit_failures,
            "insert_failures": c.retries,
            "rows_dropped_on_rebalance": c.dropped_on_rebalance,
            "broker_log_restarts": c.new_logs,
            "rate_rows": s.rate_rows,
            "rate_rows_already_stored": s.rate_rows_skipped,
            "anomaly_events": s.anomalies,
            "phases": s.phases,
            "topologies": s.topologies,
            "insert_seconds": s.insert_s,
        }

    def gauges() -> dict[str, float | None]:
        return {"lag": consumer.lag, "pending_rows": consumer.sink.pending_rows}

    def problem() -> str:
        return f"store failing: {consumer.stats.last_error}" if consumer.trouble.ongoing else ""

    return DaemonMetrics("fabricwatch_sink", counters, gauges, lambda: consumer.turned_at, problem)


def run_sink(
    settings: BrokerSettings,
    store: Store,
    group_id: str = "fabricwatch-sink",
    max_rows: int = DEFAULT_MAX_ROWS,
    max_delay_s: float = DEFAULT_MAX_DELAY_S,
    stop: threading.Event | None = None,
    idle_exit_s: float | None = None,
    consumer_options: dict[str, Any] | None = None,
    report: Callable[[str], None] | None = None,
    web: tuple[str, int] | None = None,
) -> ConsumerStats:
    """The ``fabricwatch sink`` loop; ``report`` gets one summary line at the end. With ``web``
    (address, port), ``/metrics`` and ``/healthz`` are served there while it runs."""
    from fabricwatch.streams.metrics_server import MetricsServer

    consumer = StoreConsumer(settings, store, group_id, max_rows, max_delay_s, None, consumer_options)
    with ExitStack() as stack:
        if web is not None and web[1]:
            metrics = sink_metrics(consumer)
            try:
                server = stack.enter_context(MetricsServer(metrics.registry, metrics.health, *web))
            except OSError:
                consumer.close()
                raise
            log.info("/metrics and /healthz on http://%s:%d", web[0], server.port)
        stats = consumer.run(stop, idle_exit_s)
    if report is not None:
        s = consumer.sink_stats
        report(
            f"stored {s.rate_rows} rate rows ({s.rate_rows_skipped} already stored), {s.anomalies} "
            f"anomaly events, {s.phases} phases, {s.topologies} topologies in {store.where}; "
            f"{stats.records} records, {stats.malformed} malformed, {stats.commits} commits, "
            f"{stats.retries} retries"
            + (f", {stats.new_logs} broker restarts that lost its log" if stats.new_logs else "")
        )
    return stats
