"""``fabricwatch alert``: consume ``fabric.anomalies`` and deliver alerts, committing an offset only
when everything that anomaly caused is done.

An anomaly at offset ``o`` joins one group per route that takes it; it is done when every one of
those groups has flushed it and the notification carrying it was delivered or given up (recorded),
or the flush needed no notification (nothing new, silenced). The committed offset of a partition is
its lowest offset not yet done, so a crash re-reads, and re-notifies, only what was not finished;
the re-built notification carries the same idempotency key, so the receiver can drop it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fabricwatch.alerts.config import AlertsConfig
from fabricwatch.alerts.delivery import GiveUpLog, stats_json
from fabricwatch.alerts.service import AlertService
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, decode
from fabricwatch.streams.epochs import METADATA_MAX_AGE_MS, LogEpochs
from fabricwatch.streams.kafka_io import BrokerSettings

log = logging.getLogger("fabricwatch.alerts")


class OffsetTracker:
    """Per partition, the offsets still in flight (with how many releases each awaits) and the next
    offset after the highest seen; thread-safe (delivery workers release tokens).

    A token names the log it came from: after the broker came back as a new log, offsets of the
    old one mean nothing, and releasing them (an alert opened before, ending now) changes nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[Any, dict[int, int]] = {}
        self._next: dict[Any, int] = {}
        self._log = 0

    def token(self, tp: Any, offset: int) -> tuple[Any, int, int]:
        return tp, offset, self._log

    def new_log(self) -> None:
        """Forget every offset: the broker's log started over."""
        with self._lock:
            self._pending.clear()
            self._next.clear()
            self._log += 1

    def hold(self, tp: Any, offset: int, count: int = 1) -> None:
        with self._lock:
            self._next[tp] = max(self._next.get(tp, 0), offset + 1)
            self._add(tp, offset, count)

    def done(self, token: tuple[Any, int, int]) -> None:
        tp, offset, log_no = token
        with self._lock:
            if log_no == self._log:
                self._add(tp, offset, -1)

    def _add(self, tp: Any, offset: int, count: int) -> None:
        """A count may dip below zero for a moment (a group released the token before ``hold`` said
        how many groups it joined); the offset is done when the sum comes back to zero."""
        waiting = self._pending.setdefault(tp, {})
        left = waiting.get(offset, 0) + count
        if left:
            waiting[offset] = left
        else:
            waiting.pop(offset, None)

    def committable(self) -> dict[Any, int]:
        """The offset to commit per partition: the lowest one not done, or the next after all."""
        with self._lock:
            return {tp: min(self._pending.get(tp) or {nxt: 0}) for tp, nxt in self._next.items()}

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._pending.values())


@dataclass
class ConsumerStats:
    consumed: int = 0
    malformed: int = 0
    commits: int = 0
    new_logs: int = 0
    notifications: int = 0
    delivery: dict[str, Any] = field(default_factory=dict)
    turned_at: float = field(default_factory=time.monotonic)


def run_consumer(
    settings: BrokerSettings,
    config: AlertsConfig,
    stop: threading.Event,
    group_id: str = "fabricwatch-alerts",
    commit_interval_s: float = 1.0,
    drain_s: float = 10.0,
    consumer_options: dict[str, Any] | None = None,
    web: tuple[str, int] | None = None,
    stats: ConsumerStats | None = None,
) -> ConsumerStats:
    """Consume until ``stop`` is set; then drain deliveries for up to ``drain_s`` and commit what
    is done. Malformed messages are counted, logged and committed past, never retried.
    ``consumer_options`` go to KafkaConsumer (group timeouts in tests). With ``web`` (address,
    port), ``/metrics`` and ``/healthz`` are served there while it runs. ``stats``, when given, is
    counted into as it runs (a caller watching it)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    give_up = GiveUpLog(config.give_up_log)  # a file it cannot write is refused before the broker is asked
    publisher = None
    if config.give_up_topic:
        from fabricwatch.streams.kafka_io import Publisher, ensure_topics

        ensure_topics(settings, [config.give_up_topic])
        publisher = Publisher(settings, linger_ms=0)
        topic = config.give_up_topic
        give_up.publish = lambda key, line: publisher.send(topic, key, line)

    tracker = OffsetTracker()
    service = AlertService(config, wall=True, on_token_done=tracker.done, give_up=give_up)
    options = {
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        # Kafka answers a fetch as soon as data is in; Tansu holds it open for up to this wait.
        "fetch_max_wait_ms": 100,
        "metadata_max_age_ms": METADATA_MAX_AGE_MS,
    }
    options.update(consumer_options or {})
    consumer = KafkaConsumer(topics.ANOMALIES, **settings.kafka_kwargs(), **options)
    epochs = LogEpochs(consumer, "alerts")
    stats = stats if stats is not None else ConsumerStats()
    committed: dict[Any, int] = {}
    high_water = sum(q.receiver.queue_size for q in service.queues.values()) // 2

    def commit() -> None:
        assigned = consumer.assignment()
        offsets = {
            tp: off
            for tp, off in tracker.committable().items()
            if tp in assigned and committed.get(tp) != off
        }
        if not offsets:
            return
        try:
            consumer.commit({tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()})
        except KafkaError as exc:  # a rebalance under way, a broker away: the next commit retries
            log.warning("commit of %s failed: %r", offsets, exc)
            return
        committed.update(offsets)
        stats.commits += 1

    last_commit = time.monotonic()
    server = None
    try:
        server = _serve(web, service, stats, give_up) if web is not None and web[1] else None
        while not stop.is_set():
            stats.turned_at = time.monotonic()
            if service.pending > high_water:
                consumer.pause(*consumer.assignment())
            elif consumer.paused():
                consumer.resume(*consumer.paused())
            polled = consumer.poll(timeout_ms=100, max_records=1000)
            if epochs.changed():  # read again from the new log's beginning; repeats notify nobody twice
                tracker.new_log()
                committed.clear()
                stats.new_logs += 1
                continue
            for tp, records in polled.items():
                for rec in records:
                    stats.consumed += 1
                    _ingest(service, tracker, tp, rec, stats)
            if time.monotonic() - last_commit >= commit_interval_s:
                commit()
                last_commit = time.monotonic()
        service.close(drain_s)
        commit()
        stats.notifications = service.notifications
        stats.delivery = stats_json(service.queues)
    finally:
        consumer.close(autocommit=False)
        if server is not None:
            server.stop()
        if publisher is not None:
            publisher.close()
    return stats


def _serve(web: tuple[str, int], service: AlertService, stats: ConsumerStats, give_up: GiveUpLog) -> Any:
    """``/metrics`` and ``/healthz``: what was consumed and notified, each receiver's deliveries,
    give-ups and retries, what is queued, and whether the loop still turns."""
    from fabricwatch.streams.daemon_metrics import DaemonMetrics
    from fabricwatch.streams.metrics_server import MetricsServer

    def counters() -> dict[str, float]:
        return {
            "anomalies": stats.consumed,
            "malformed_anomalies": stats.malformed,
            "commits": stats.commits,
            "broker_log_restarts": stats.new_logs,
            "notifications": service.notifications,
            "repeats": service.alerter.repeats,
            "give_up_log_failures": give_up.failures,
        }

    def by_receiver() -> dict[tuple[str, str], dict[str, float]]:
        queues = service.queues
        return {
            (what, "receiver"): {name: getattr(q.stats, what) for name, q in queues.items()}
            for what in ("delivered", "given_up", "retries")
        }

    def problem() -> str:
        given_up = sum(q.stats.given_up for q in service.queues.values())
        return f"{given_up} notifications given up" if given_up else ""

    metrics = DaemonMetrics(
        "fabricwatch_alert",
        counters,
        lambda: {"queued_notifications": service.pending},
        lambda: stats.turned_at,
        problem,
        by_receiver,
    )
    server = MetricsServer(metrics.registry, metrics.health, *web).start()
    log.info("/metrics and /healthz on http://%s:%d", web[0], server.port)
    return server


def _ingest(service: AlertService, tracker: OffsetTracker, tp: Any, rec: Any, stats: ConsumerStats) -> None:
    """Hold the offset while the anomaly is routed, then once per group it joined."""
    tracker.hold(tp, rec.offset)
    token = tracker.token(tp, rec.offset)
    try:
        anomaly = decode(rec.value, Anomaly)
    except DecodeError as exc:
        stats.malformed += 1
        log.warning("%s[%d]@%d: malformed anomaly skipped: %s", tp.topic, tp.partition, rec.offset, exc)
    else:
        tracker.hold(tp, rec.offset, service.ingest(anomaly, token))
    tracker.done(token)
