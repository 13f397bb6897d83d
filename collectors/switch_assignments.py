"""Which switches this replica of the switch collector polls: Kafka's consumer-group protocol over a
small topic of switch assignments, so that each switch is polled by exactly one replica and a dead
replica's switches move to the others, with no election of our own.

``fabric.switches`` holds one record per switch, keyed by its name (a hash of the key picks the
partition), its value the switch's entry (name, Redis URL) as JSON; an empty value removes it.
Every replica joins one consumer group on that topic. The group gives each partition to exactly one
member, and reassigns the partitions of a member that leaves, or stops heartbeating for the session
timeout (``SESSION_TIMEOUT_S``, well inside a minute). On each assignment a member reads its
partitions from the beginning: their latest record per switch is its share.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import msgspec

from fabricwatch.ingest.sonic.poll import SwitchTarget
from fabricwatch.schemas import topics
from fabricwatch.streams.kafka_io import BrokerSettings, Publisher, ensure_topics

GROUP = "fabricwatch-switch-collectors"
SESSION_TIMEOUT_S = 20.0


def publish_switches(settings: BrokerSettings, switches: list[SwitchTarget], removed: list[str]) -> int:
    """Put every switch's entry on the assignments topic, and a removal for each of ``removed``."""
    ensure_topics(settings, [topics.SWITCHES])
    publisher = Publisher(settings)
    try:
        for switch in switches:
            publisher.send(topics.SWITCHES, switch.name, msgspec.json.encode(switch))
        for name in removed:
            publisher.send(topics.SWITCHES, name, b"")
    finally:
        publisher.close()
    return publisher.stats.acked


class Assignments:
    """This member's share of the switches, kept current by a consumer in a thread of its own."""

    def __init__(
        self,
        settings: BrokerSettings,
        warn: Callable[[str], None],
        group: str = GROUP,
        session_timeout_s: float = SESSION_TIMEOUT_S,
    ) -> None:
        from kafka import KafkaConsumer

        ensure_topics(settings, [topics.SWITCHES])
        self._warn = warn
        self._lock = threading.Lock()
        self._by_partition: dict[Any, dict[str, SwitchTarget]] = {}
        self.changed = threading.Event()
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            **settings.kafka_kwargs(),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=int(session_timeout_s * 1000),
            heartbeat_interval_ms=int(session_timeout_s * 1000 / 5),
        )
        self._consumer.subscribe([topics.SWITCHES], listener=_listener(self))
        self._thread = threading.Thread(target=self._run, name="assignments", daemon=True)
        self._thread.start()

    def current(self) -> list[SwitchTarget]:
        with self._lock:
            targets = [t for share in self._by_partition.values() for t in share.values()]
        return sorted(targets, key=lambda t: t.name)

    def close(self) -> None:
        """Leave the group: the others take this member's switches at once."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for tp, records in self._consumer.poll(timeout_ms=500).items():
                    for record in records:
                        self._apply(tp, record.key, record.value)
        finally:
            self._consumer.close(autocommit=False)

    def _apply(self, tp: Any, key: bytes | None, value: bytes | None) -> None:
        name = (key or b"").decode("utf-8", "replace")
        with self._lock:
            share = self._by_partition.setdefault(tp, {})
            if not value:
                share.pop(name, None)
            else:
                try:
                    share[name] = msgspec.json.decode(value, type=SwitchTarget)
                except msgspec.DecodeError as exc:
                    self._warn(f"{topics.SWITCHES}: the entry of {name!r} is not a switch ({exc}); skipped")
                    return
            self._bump()

    def _assigned(self, partitions: Any) -> None:
        with self._lock:
            for tp in partitions:
                self._by_partition[tp] = {}
            self._bump()
        self._consumer.seek_to_beginning(*partitions)

    def _revoked(self, partitions: Any) -> None:
        with self._lock:
            for tp in partitions:
                self._by_partition.pop(tp, None)
            self._bump()

    def _bump(self) -> None:
        self.changed.set()


def _listener(owner: Assignments) -> Any:
    """A kafka-python ConsumerRebalanceListener (it insists on the class) calling back ``owner``."""
    from kafka import ConsumerRebalanceListener

    class Rebalance(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            owner._revoked(revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            owner._assigned(assigned)

    return Rebalance()
