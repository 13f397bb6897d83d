"""Burst captures as a collector (``fabricwatch collect burst``): each interface sampled every
millisecond or faster for a few seconds (``ingest/nic/burst.py``), on demand, or each time an
incident fires naming this host (``watch_incidents``), each profile handed to the frame for
``fabric.bursts`` (the store, the report)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from fabricwatch.collectors.frame import Frame
from fabricwatch.ingest.nic.burst import CaptureError, IncidentTrigger, capture, profile
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, BurstProfile, DecodeError, decode
from fabricwatch.streams.kafka_io import BrokerSettings, ensure_topics

TOPICS = (topics.BURSTS,)


@dataclass(frozen=True)
class BurstSettings:
    netdevs: tuple[str, ...]
    host: str
    period_s: float = 0.001
    seconds: float = 2.0
    line_Bps: float = 50e9
    cooldown_s: float = 300.0
    """``watch_incidents``: at most one capture every this many seconds."""
    max_captures: int = 0
    """``watch_incidents``: stop after this many (0: never)."""


def capture_all(s: BurstSettings, trigger: str = "") -> tuple[list[BurstProfile], list[str]]:
    """One profile per interface, in order, and what failed (one interface costs only itself)."""
    taken, failed = [], []
    for netdev in s.netdevs:
        try:
            prof = profile(capture(netdev, s.period_s, s.seconds), s.line_Bps, s.period_s)
        except CaptureError as exc:
            failed.append(str(exc))
            continue
        taken.append(msgspec.structs.replace(prof, host=s.host, trigger=trigger))
    return taken, failed


def watch_incidents(s: BurstSettings, frame: Frame, broker: BrokerSettings) -> int:
    """Read ``fabric.anomalies`` from its end, without a group (every host reads every incident),
    and capture the interfaces when ``IncidentTrigger`` says so; until the frame is stopped or
    ``max_captures``. Returns the captures made."""
    from kafka import KafkaConsumer

    ensure_topics(broker, [topics.ANOMALIES])  # the watcher may start before any worker
    trigger = IncidentTrigger(s.host, s.cooldown_s)
    incidents = _Incidents(KafkaConsumer(**broker.kafka_kwargs(), enable_auto_commit=False), frame)
    captures = 0
    try:
        incidents.from_the_end()
        frame.say(f"watching {topics.ANOMALIES} for incidents on {s.host}")
        while not frame.stop.is_set() and not (s.max_captures and captures >= s.max_captures):
            for anomaly in incidents.poll():
                if trigger.wants(anomaly, time.monotonic()):
                    _capture_for(s, anomaly, frame)
                    captures += 1
    finally:
        incidents.consumer.close()
    return captures


@dataclass
class _Incidents:
    """``fabric.anomalies`` decoded; a message that is not an incident costs only itself: counted,
    and said once."""

    consumer: Any
    frame: Frame
    malformed: int = 0

    def from_the_end(self) -> None:
        from kafka import TopicPartition

        numbers = self.consumer.partitions_for_topic(topics.ANOMALIES) or ()
        parts = [TopicPartition(topics.ANOMALIES, p) for p in numbers]
        self.consumer.assign(parts)
        self.consumer.seek_to_end(*parts)
        for tp in parts:
            self.consumer.position(tp)

    def poll(self) -> Iterator[Anomaly]:
        for records in self.consumer.poll(timeout_ms=500).values():
            for rec in records:
                try:
                    yield decode(rec.value, Anomaly)
                except DecodeError as exc:
                    self.malformed += 1
                    if self.malformed == 1:
                        self.frame.warn(f"malformed incident skipped (reported once): {exc}")


def _capture_for(s: BurstSettings, anomaly: Anomaly, frame: Frame) -> None:
    taken, failed = capture_all(s, anomaly.fingerprint)
    for text in failed:
        frame.warn(text)
    for prof in taken:
        frame.put(topics.BURSTS, prof.host, prof, prof.start_ns)
        frame.say(f"captured {prof.netdev} for {anomaly.kind} {anomaly.fingerprint}")
    if frame.publisher is not None:
        frame.publisher.flush()
