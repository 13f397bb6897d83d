"""Kafka plumbing shared by every command that talks to a broker: settings, topics, a publisher.

Settings come from a config file's ``broker:`` section and the environment (environment wins, so a
Kubernetes secret can supply the password); a secret is never logged or printed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec

from fabricwatch.schemas import topics
from fabricwatch.schemas.config import AtLeastOne, ConfigError, ConfigFile, Positive

DEFAULT_PARTITIONS = {
    topics.COUNTERS: 12,
    topics.PHASES: 3,
    topics.TOPOLOGY: 1,
    topics.SWITCHES: 12,
    topics.RATES: 12,
    topics.RHYTHM: 3,
    topics.BURSTS: 1,
    topics.SYMPTOMS: 6,
    topics.ANOMALIES: 3,
    topics.PROGRESS: 1,
    topics.DEADLETTER: 3,
    topics.STATE: 12,
}
"""Counters and rates are keyed by device and carry the volume; stage 2 reads symptoms by pod."""

TOPIC_CONFIGS = {topics.STATE: {"retention.ms": str(6 * 3600 * 1000)}}
"""Stage 1 reads its saved windows back over minutes (``window_keeper``): six hours keep them for
any restart worth carrying a window over, and no more."""

_ENV = {
    "bootstrap": "FABRICWATCH_BROKER",
    "security_protocol": "FABRICWATCH_SECURITY_PROTOCOL",
    "sasl_mechanism": "FABRICWATCH_SASL_MECHANISM",
    "sasl_username": "FABRICWATCH_SASL_USERNAME",
    "sasl_password": "FABRICWATCH_SASL_PASSWORD",
    "ssl_cafile": "FABRICWATCH_SSL_CAFILE",
}


Codec = Literal["zstd", "lz4", "gzip", "none"]
CODECS: tuple[str, ...] = get_args(Codec)
"""The producers' codecs ``broker.compression`` offers ("none": no compression)."""


class BrokerSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    bootstrap: str = ""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    connect_timeout_s: Positive = 10.0
    partitions: dict[str, AtLeastOne] = msgspec.field(default_factory=dict)
    compression: Codec = "zstd"
    """How ``Publisher`` compresses its batches: the collectors, ``replay``, ``run`` and the other
    producers outside the workers. Stage 1 pays the decompression of every counters message and
    the collectors the compression:
    ``bench/bench_consumer.py`` measured zstd at 9 µs a message to read (aiokafka) against gzip's
    16-22, 98 µs to publish against gzip's 1,081, and 0.18 of the bytes against gzip's 0.25."""

    def __repr__(self) -> str:
        return f"BrokerSettings(bootstrap={self.bootstrap!r}, security_protocol={self.security_protocol!r})"

    def with_bootstrap(self, bootstrap: str) -> BrokerSettings:
        return msgspec.structs.replace(self, bootstrap=bootstrap)

    def kafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python clients."""
        kw: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            kw.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if self.ssl_cafile:
            if not os.path.isfile(self.ssl_cafile):  # else a TLS error deep in kafka-python, file unnamed
                raise ConfigError(
                    f"broker.ssl_cafile (or FABRICWATCH_SSL_CAFILE): {self.ssl_cafile}: no such file (the CA "
                    "certificate the broker's is checked against: mount or copy it there)"
                )
            kw["ssl_cafile"] = self.ssl_cafile
        return kw

    def partitions_of(self, topic: str) -> int:
        if topic == topics.STATE:  # one for each counters partition, whatever their number
            return self.partitions_of(topics.COUNTERS)
        return self.partitions.get(topic, DEFAULT_PARTITIONS.get(topic, 1))


def load_broker_settings(path: Path | None = None, environ: dict[str, str] | None = None) -> BrokerSettings:
    """The ``broker:`` section of a config file (optional), overridden by FABRICWATCH_* variables."""
    environ = dict(os.environ) if environ is None else environ
    overrides = {key: environ[var] for key, var in _ENV.items() if environ.get(var)}
    return ConfigFile(path).section("broker", BrokerSettings, overrides)


def ensure_topics(settings: BrokerSettings, names: list[str] | None = None) -> list[str]:
    """Create the missing topics with their partition counts; return the ones created. Idempotent."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    exists = TopicAlreadyExistsError.errno
    wanted = names or list(DEFAULT_PARTITIONS)
    admin = KafkaAdminClient(
        **settings.kafka_kwargs(), bootstrap_timeout_ms=int(settings.connect_timeout_s * 1000)
    )
    try:
        missing = sorted(set(wanted) - set(admin.list_topics()))
        if not missing:
            return []
        result = admin.create_topics(
            [
                NewTopic(t, settings.partitions_of(t), 1, topic_configs=TOPIC_CONFIGS.get(t, {}))
                for t in missing
            ],
            raise_errors=False,
        )
        # Another client may create one in between (a worker's producer, right after a restart).
        failed = [t for t in result["topics"] if t["error_code"] not in (0, exists)]
        if failed:
            raise KafkaError(
                "; ".join(
                    f"cannot create topic {t['name']}: {t['error_message'] or t['error_code']}"
                    for t in failed
                )
            )
        return missing
    finally:
        admin.close()


def log_ends(consumer: Any, tps: list[Any], timeout_s: float = 5.0) -> dict[Any, int]:
    """The offset after each partition's last record, with the kafka-python ``consumer`` assigned
    to ``tps`` and positioned there.

    Kafka answers a ListOffsets request with it. Tansu answers with the start of the partition's
    last batch of records (measured: 550 against 616 records in 12 partitions), so a reader that
    trusts it stops short of the last batch, or takes that batch for new. A fetch from there
    carries the true high watermark, so the answer is checked by one."""
    listed = consumer.end_offsets(tps)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, listed[tp])
    deadline = time.monotonic() + timeout_s
    while any(consumer.highwater(tp) is None for tp in tps) and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)  # the records of those last batches are not wanted
    ends = {tp: max(listed[tp], consumer.highwater(tp) or 0) for tp in tps}
    for tp in tps:
        consumer.seek(tp, ends[tp])
    return ends


async def log_ends_aio(consumer: Any, tps: list[Any]) -> dict[Any, int]:
    """``log_ends`` for an aiokafka consumer that is reading ``tps``: the larger of the broker's
    answer to ListOffsets and the high watermark of the consumer's last fetch (Tansu answers
    ListOffsets short, see ``log_ends``).

    A partition a rebalance took during the wait has no fetch of ours: its end is the broker's
    answer alone. (aiokafka's ``highwater`` asserts on a partition that is not assigned: asked
    regardless, that crashed workers whenever a peer joined or left the group.)"""
    listed = await consumer.end_offsets(list(tps))
    owned = consumer.assignment()
    return {
        tp: max(listed.get(tp) or 0, (consumer.highwater(tp) if tp in owned else None) or 0) for tp in tps
    }


@contextlib.asynccontextmanager
async def placed(consumer: Any, tps: Any) -> AsyncIterator[None]:
    """Hold ``tps`` back from an aiokafka ``consumer``'s fetches while a rebalance listener decides
    where they start. aiokafka hands a new assignment to its fetcher before it calls the listener,
    so while the listener waits on the broker, a partition would be fetched from its reset
    position and its records handed out before the seek (seen in CI: an upgraded worker read again
    what the earlier build had processed). Enter first thing in ``on_partitions_assigned``."""
    consumer.pause(*tps)
    try:
        yield
    finally:  # a rebalance while the listener waited may have taken some of them already
        consumer.resume(*(set(tps) & consumer.assignment()))


async def seek_since(consumer: Any, tps: list[Any], seconds: float) -> None:
    """Place the aiokafka ``consumer``'s assigned ``tps`` at their first record of the last
    ``seconds`` (by its timestamp), or at their end when they have none that recent."""
    since_ms = int((time.time() - seconds) * 1000)
    found = await consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
    for tp in tps:
        at = found.get(tp)
        if at is None:
            await consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, at.offset)


async def read_to_end(consumer: Any, tps: list[Any]) -> bool:
    """Whether the aiokafka ``consumer`` has read ``tps`` to their end. Only after a fetch
    answered for each: before one, Tansu's short ListOffsets answer (see ``log_ends``) calls a
    one-record partition empty."""
    if any(consumer.highwater(tp) is None for tp in tps):
        return False
    ends = await log_ends_aio(consumer, tps)
    positions = [await consumer.position(tp) for tp in tps]
    return all(p >= ends[tp] for p, tp in zip(positions, tps, strict=True))


@dataclass
class PublisherStats:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    dropped: int = 0
    last_error: str = ""
    failures_by_topic: dict[str, int] = field(default_factory=dict)


class Publisher:
    """kafka-python producer tuned for device snapshots: batches of hundreds of KB compress well;
    bytes not yet acknowledged are bounded (kafka-python 3 has no buffer limit of its own), so when
    the broker is away ``send`` blocks for up to ``max_block_s`` (backpressure) and then drops, and
    every message that is not delivered is counted, never lost silently.

    A message the broker refused with an error kafka-python does not retry is sent again, up to
    ``RESENDS`` times, from the caller's next ``send`` or ``flush`` (the producer's I/O thread,
    which reports the error, must not block); one that timed out is not (it would only come later
    still). The case: a restarted embedded broker answers ``UnknownError`` for partitions of a
    topic it has not recreated yet, in the fraction of a second before ``ensure_topics`` runs;
    measured, 56 of 6,221 snapshots of a replay were lost that way before they were sent again."""

    RESENDS = 3

    def __init__(
        self,
        settings: BrokerSettings,
        linger_ms: int = 20,
        batch_size: int = 512 * 1024,
        max_unacked_bytes: int = 64 * 1024 * 1024,
        max_block_s: float = 30.0,
    ) -> None:
        from kafka import KafkaProducer

        self.stats = PublisherStats()
        self.max_unacked_bytes = max_unacked_bytes
        self.max_block_s = max_block_s
        self._unacked = 0
        self._lock = threading.Lock()
        self._refused: list[tuple[str, str | None, bytes, int | None, int]] = []
        self._producer = KafkaProducer(
            **settings.kafka_kwargs(),
            linger_ms=linger_ms,
            batch_size=batch_size,
            compression_type=None if settings.compression == "none" else settings.compression,
            max_block_ms=int(max_block_s * 1000),
            max_request_size=8 * 1024 * 1024,
            acks="all",
            retries=5,
            # An idempotent producer cannot go on after the broker lost its state (a restarted
            # embedded broker, a rebuilt cluster): every later send failed on InitProducerId with
            # UnknownError. A duplicate a retry may write instead is dropped downstream (stage 1
            # drops repeated snapshots, the sink stores a poll once).
            enable_idempotence=False,
        )

    def send(self, topic: str, key: str | None, value: bytes, ts_ns: int | None = None) -> None:
        self._send_refused()
        self._send(topic, key, value, ts_ns, 0)

    def _send(self, topic: str, key: str | None, value: bytes, ts_ns: int | None, resends: int) -> None:
        from kafka.errors import KafkaError

        if self._unacked + len(value) > self.max_unacked_bytes:
            self._producer.flush(timeout=self.max_block_s)
        if self._unacked + len(value) > self.max_unacked_bytes:
            self._drop(topic, f"{self._unacked} bytes still unacknowledged after {self.max_block_s} s")
            return
        try:
            future = self._producer.send(
                topic,
                key=key.encode() if key is not None else None,
                value=value,
                timestamp_ms=ts_ns // 1_000_000 if ts_ns is not None else None,
            )
        except KafkaError as exc:  # metadata unavailable past max_block, message too large, ...
            self._drop(topic, f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self._unacked += len(value)
        if not resends:
            self.stats.sent += 1
        future.add_callback(self._acked, len(value))
        future.add_errback(self._failed, (topic, key, value, ts_ns, resends))

    def _send_refused(self) -> None:
        if not self._refused:  # the common case, without taking the lock on every send
            return
        with self._lock:
            refused, self._refused = self._refused, []
        for topic, key, value, ts_ns, resends in refused:
            self._send(topic, key, value, ts_ns, resends + 1)

    def flush(self, timeout_s: float | None = None) -> None:
        self._producer.flush(timeout=timeout_s)
        for _ in range(self.RESENDS):
            if not self._refused:
                break
            self._send_refused()
            self._producer.flush(timeout=timeout_s)

    def metric(self, name: str) -> float:
        """One of kafka-python's producer metrics (its ``producer-metrics`` group), such as
        ``compression-rate-avg``: what the benchmarks read of the producer beside our own counts."""
        return float(self._producer.metrics()["producer-metrics"][name])

    def close(self, timeout_s: float = 10.0) -> None:
        self.flush(timeout_s)
        self._producer.close(timeout=timeout_s)

    def _drop(self, topic: str, why: str) -> None:
        self.stats.dropped += 1
        self.stats.last_error = f"{topic}: {why}"

    def _acked(self, size: int, _metadata: object) -> None:
        with self._lock:
            self._unacked -= size
            self.stats.acked += 1

    def _failed(self, message: tuple[str, str | None, bytes, int | None, int], exc: BaseException) -> None:
        from kafka.errors import KafkaTimeoutError

        topic, _key, value, _ts_ns, resends = message
        with self._lock:
            self._unacked -= len(value)
            if resends < self.RESENDS and not isinstance(exc, KafkaTimeoutError):  # late is lost
                self._refused.append(message)
                return
            self.stats.failed += 1
            self.stats.failures_by_topic[topic] = self.stats.failures_by_topic.get(topic, 0) + 1
            self.stats.last_error = f"{topic}: {type(exc).__name__}: {exc}"
