"""Trace files to and from a broker: ``replay --broker`` publishes, ``record`` consumes.

Replay paces records by their trace time: at the original pace (``speed`` 1), N times faster, or as
fast as the broker takes them (``speed`` 0). Labels are ground truth for scoring, never traffic: they
stay in the file. Record writes what it consumes in consumption order (each partition's order is
kept, which is the order that matters: one device, one partition) with the broker's timestamps.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.schemas import topics
from fabricwatch.schemas.trace import TraceReader, TraceWriter
from fabricwatch.streams.kafka_io import BrokerSettings, Publisher, PublisherStats, ensure_topics

TRAFFIC = [topics.TOPOLOGY, topics.PHASES, topics.COUNTERS]


@dataclass
class PublishResult:
    records: int
    skipped_labels: int
    malformed_lines: int
    wall_s: float
    stats: PublisherStats


class Pace:
    """When each record of a trace is due, at ``speed`` times its recorded pace from ``started``
    (monotonic seconds). Time follows the records, except a record stamped far ahead of the rest
    (``JUMP_S``): one device's clock an hour ahead stalled ``replay --speed 4`` for 900 s. It is
    sent at once and moves nothing; the trace's time jumps only when ``CONFIRM`` records in a row
    are that far ahead (a gap in the recording, which a faithful replay waits out)."""

    JUMP_S = 30.0
    CONFIRM = 20

    def __init__(self, speed: float, started: float) -> None:
        self.speed, self.started = speed, started
        self.first_ns: int | None = None
        self.now_ns = 0
        self._ahead = 0

    def due(self, ts_ns: int) -> float:
        if self.first_ns is None:
            self.first_ns = self.now_ns = ts_ns
        if ts_ns - self.now_ns > self.JUMP_S * 1e9:
            self._ahead += 1
            if self._ahead < self.CONFIRM:
                return self.started  # now: out of line with the rest, it sets no pace
        self._ahead = 0
        self.now_ns = max(self.now_ns, ts_ns)
        return self.started + (self.now_ns - self.first_ns) / 1e9 / self.speed


def publish_trace(
    path: Path, settings: BrokerSettings, speed: float = 0.0, stop: threading.Event | None = None
) -> PublishResult:
    """Publish a trace's records, at ``speed`` times their recorded pace (0: as fast as the broker
    takes them), until the trace ends or ``stop`` is set."""
    stop = stop or threading.Event()
    ensure_topics(settings)
    publisher = Publisher(settings)
    records = labels = 0
    started = time.monotonic()
    pace = Pace(speed, started)
    try:
        with TraceReader(path) as reader:
            for rec in reader:
                if rec.topic == topics.LABELS:
                    labels += 1
                    continue
                if speed > 0:
                    stop.wait(max(0.0, pace.due(rec.ts_ns) - time.monotonic()))
                if stop.is_set():
                    break
                publisher.send(rec.topic, rec.key, rec.value(), rec.ts_ns)
                records += 1
            malformed = reader.malformed
    finally:
        publisher.close()
    return PublishResult(records, labels, malformed, time.monotonic() - started, publisher.stats)


def record_topics(
    settings: BrokerSettings,
    out: Path,
    names: list[str],
    idle_s: float = 5.0,
    max_records: int | None = None,
    from_beginning: bool = True,
) -> int:
    """Consume ``names`` into a trace until ``idle_s`` passes without a message (or ``max_records``)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        *names,
        **settings.kafka_kwargs(),
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=False,
        consumer_timeout_ms=int(idle_s * 1000),
    )
    count = 0
    meta = {"topics": names, "bootstrap": settings.bootstrap}
    try:
        with TraceWriter(out, "record", time.time_ns(), meta) as writer:
            for msg in consumer:
                key = msg.key.decode(errors="replace") if msg.key is not None else None
                writer.write(msg.topic, key, msg.timestamp * 1_000_000, msg.value)
                count += 1
                if max_records is not None and count >= max_records:
                    break
    finally:
        consumer.close()
    return count
