"""The gNMI translator stage: gnmic's or Telegraf's Kafka topic in, switch snapshots out to
``fabric.counters``.

A plain kafka-python consumer in a consumer group, not a Faust agent (docs/collectors.md says why):
it keeps one open sample per device and closes samples on wall-clock time, which an agent only
gets with a timer beside it; it needs none of Faust's tables or changelogs; and the group protocol
alone spreads the topic's partitions over as many translators as are run. A device must stay on
one partition (gnmic ``insert-key: true``, Telegraf ``routing_tag = "source"``) so that one
translator sees all of its samples.

Offsets are committed only after the snapshots built from the records before them were
acknowledged by the broker (at least once). A sample still open at a commit is rebuilt after a
restart from the records after the commit, so a restart costs at most that sample.

The same stream's OpenConfig LLDP neighbours and port speeds, when subscribed, become each switch's
topology report on ``fabric.topology`` (``ingest/gnmi/topology.py``), keyed by ``switch:NAME``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fabricwatch.collectors.frame import Frame
from fabricwatch.collectors.metrics import TranslateMetrics
from fabricwatch.ingest.gnmi.messages import Format, parse_message
from fabricwatch.ingest.gnmi.snapshots import SnapshotAssembler
from fabricwatch.ingest.gnmi.topology import LldpAssembler
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Snapshot

COMMIT_EVERY_S = 1.0
TOPICS = (topics.COUNTERS, topics.TOPOLOGY)


@dataclass
class TranslateStats:
    messages: int = 0
    bad_messages: int = 0
    problems: dict[str, int] = field(default_factory=dict)


def translate(
    frame: Frame,
    fmt: Format,
    from_topic: str,
    group: str,
    assembler: SnapshotAssembler,
    from_beginning: bool = False,
    stats: TranslateStats | None = None,
    topology: LldpAssembler | None = None,
) -> TranslateStats:
    """Translate until ``frame.stop`` is set; the samples still open then are sent. With
    ``topology``, LLDP neighbours become reports."""
    from kafka import KafkaConsumer

    settings, publisher = frame.destination.broker, frame.publisher
    if settings is None or publisher is None:
        raise ValueError("the translator reads and writes a broker: give --broker HOST:PORT")
    stats = stats if stats is not None else TranslateStats()
    metrics = TranslateMetrics(lambda: _counts(stats, assembler), frame.published)
    frame.serve(metrics.registry, metrics.health)
    consumer = KafkaConsumer(
        from_topic,
        **settings.kafka_kwargs(),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
    )
    said: set[str] = set()

    def send(snaps: list[Snapshot]) -> None:
        for snap in snaps:
            frame.put(topics.COUNTERS, snap.device, snap, snap.ts_ns)
        if topology is not None:
            topology.seen(snap.device for snap in snaps)
            for report in topology.due():
                frame.put(topics.TOPOLOGY, report.source, report, report.ts_ns)

    try:
        committed = time.monotonic()
        while not frame.stop.is_set():
            for records in consumer.poll(timeout_ms=200, max_records=5000).values():
                for record in records:
                    stats.messages += 1
                    parsed = parse_message(fmt, record.value or b"")
                    if parsed.problems:
                        stats.bad_messages += 1
                        _count(stats, parsed.problems, said, frame.warn)
                    if topology is not None and parsed.texts:
                        topology.add(parsed.texts)
                    send(assembler.add(parsed.points))
            send(assembler.due())
            metrics.read_done()
            if time.monotonic() - committed >= COMMIT_EVERY_S:
                publisher.flush()
                consumer.commit()
                committed = time.monotonic()
        send(assembler.close())
        publisher.flush()
        consumer.commit()
    finally:
        consumer.close(autocommit=False)
    return stats


def _counts(stats: TranslateStats, assembler: SnapshotAssembler) -> dict[str, int]:
    a = assembler.stats
    return {
        "messages": stats.messages,
        "bad_messages": stats.bad_messages,
        "values": a.points,
        "snapshots": a.snapshots,
        "late_values": a.late,
        "unknown_paths": a.unknown_paths,
    }


def _count(stats: TranslateStats, problems: list[str], said: set[str], warn: Callable[[str], None]) -> None:
    for problem in problems:
        kind = problem.split(":")[0][:60]
        stats.problems[kind] = stats.problems.get(kind, 0) + 1
        if kind not in said:
            said.add(kind)
            warn(f"{problem}; skipped (said once per kind, counted)")
