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
from dataclasses import dataclass
from typing import Any

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    Anomaly,
    DecodeError,
    PhaseMessage,
    PortRates,
    RatesBatch,
    Topology,
    decode,
)
from fabricwatch.storage.backends import StoreError
from fabricwatch.storage.sink import DEFAULT_MAX_DELAY_S, DEFAULT_MAX_ROWS, Sink, SinkStats
from fabricwatch.storage.store import Store
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
                now = time.monotonic()
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
) -> ConsumerStats:
    """The ``fabricwatch sink`` loop; ``report`` gets one summary line at the end."""
    consumer = StoreConsumer(settings, store, group_id, max_rows, max_delay_s, None, consumer_options)
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
