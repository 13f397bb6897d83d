"""The Faust app behind ``fabricwatch worker``: stage 1 and stage 2 as two thin agents.

- Stage 1 consumes ``fabric.counters`` (keyed by device) in batches and publishes rates (by device)
  and symptoms plus watermarks (by pod). Batching amortises Faust's per-event cost over a batch
  of snapshots; the batch's events are acknowledged only after its output was handed to the
  producer, so a crash redelivers, never skips (at-least-once).
- Stage 2 consumes ``fabric.symptoms`` and publishes anomaly lifecycle events keyed by fingerprint,
  which is a hash of kind and root: a redelivered incident has the same fingerprint, so consumers
  remove duplicates by it.
- Topology and phases are small and every worker needs all of them, so each worker reads them
  with its own group-less consumer (Faust would split them across workers like any topic).

What survives a restart or a rebalance is decided in ``docs/streaming.md``: nothing is
changelogged; a device's state is rebuilt from its next snapshots.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, Phase, Topology, decode, encode
from fabricwatch.streams.health import Progress
from fabricwatch.streams.kafka_io import BrokerSettings
from fabricwatch.streams.stages import DEFAULT_MAX_MESSAGE_BYTES, Keyed, Stage1Worker, Stage2Worker
from faust.exceptions import ProducerSendError
from faust.transport.drivers import aiokafka as faust_aiokafka

DEAD_LETTER_HEAD = 64 * 1024
"""What is kept of a message too large for the dead-letter topic itself."""


@dataclass
class WorkerOptions:
    broker: BrokerSettings
    config: DetectorConfig = field(default_factory=DetectorConfig)
    outliers: OutlierStage | None = None
    app_id: str = "fabricwatch"
    web_bind: str = "127.0.0.1"
    web_port: int = 6066
    datadir: Path = Path("/tmp/fabricwatch-worker")
    batch_max: int = 500
    batch_within_s: float = 0.02
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    session_timeout_s: float = 10.0
    stall_after_s: float = 30.0
    topology_wait_s: float = 5.0
    fetch_max_wait_ms: int = 100
    heartbeat_s: float = 0.2
    """How often stage 1 tells stage 2 which partitions it has read to the end (latency at the end
    of each poll's burst)."""
    stall_source_s: float = 30.0
    """An input partition with lag that stays this long without progress stops holding stage 2
    back (see Stage2Worker); at least twice the session timeout, so a takeover loses nothing."""
    phases_lookback: int = 10_000
    """Phases re-read at start per partition: stage 2 only needs the ones still running."""


def make_app(opts: WorkerOptions) -> faust.App:
    """A Faust app wired to the pure stages; ``fabricwatch worker`` runs it with ``faust.Worker``."""
    _limit_fetch_wait(opts.fetch_max_wait_ms)
    timeout = opts.session_timeout_s
    app = faust.App(
        opts.app_id,
        broker=[f"kafka://{b}" for b in opts.broker.bootstrap.split(",")],
        broker_credentials=_credentials(opts.broker),
        key_serializer="raw",
        value_serializer="raw",
        store="memory://",
        datadir=str(opts.datadir),
        topic_disable_leader=True,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=timeout,
        broker_heartbeat_interval=max(timeout / 6, 0.5),
        broker_rebalance_timeout=timeout,
        broker_max_poll_interval=max(timeout, 30.0),
        producer_linger=0.005,
        producer_max_request_size=opts.max_message_bytes + 1024 * 1024,
        web_bind=opts.web_bind,
        web_port=opts.web_port,
        web_host=socket.gethostname(),
    )
    progress = Progress(stall_after_s=opts.stall_after_s)
    stage1 = Stage1Worker(opts.config, opts.outliers, opts.max_message_bytes)
    stage2 = Stage2Worker(opts.config, stall_after_s=max(opts.stall_source_s, 2 * timeout))
    stage1_lock = asyncio.Lock()
    stage2_lock = asyncio.Lock()
    topology_seen = asyncio.Event()
    processed: dict[Any, int] = {}
    counters = app.topic(topics.COUNTERS)
    symptoms = app.topic(topics.SYMPTOMS)
    anomalies = app.topic(topics.ANOMALIES)
    deadletter = app.topic(topics.DEADLETTER)

    async def send(topic: str, message: Keyed) -> None:
        """Straight to the producer: the values are bytes already, and at one rates message per
        snapshot Faust's channel layer (serialisers, callbacks) costs more than the send itself."""
        await app.producer.send(topic, message.key, message.value, None, None, None)

    async def dead_letter(event: Any, reason: str) -> None:
        m = event.message
        progress.dead_letter(reason)
        headers = [
            ("reason", reason.encode()),
            ("topic", m.topic.encode()),
            ("partition", str(m.partition).encode()),
            ("offset", str(m.offset).encode()),
        ]
        try:
            await deadletter.send(key=m.key, value=m.value, headers=headers)
        except ProducerSendError:
            # Too big even for the dead-letter topic: keep its head, and say so.
            headers.append(("truncated_from", str(len(m.value or b"")).encode()))
            await deadletter.send(key=m.key, value=(m.value or b"")[:DEAD_LETTER_HEAD], headers=headers)

    @app.agent(counters)
    async def stage1_agent(stream: faust.StreamT) -> None:
        async for events in stream.take_events(opts.batch_max, within=opts.batch_within_s):
            if not topology_seen.is_set():
                await _wait(topology_seen, opts.topology_wait_s)
            sources = [f"{e.message.topic}/{e.message.partition}" for e in events]
            async with stage1_lock:  # a heartbeat's watermark must not overtake this batch's symptoms
                out = stage1.process([e.message.value for e in events], sources)
                for r in out.rejected:
                    await dead_letter(events[r.index], r.reason)
                for k in out.rates:
                    await send(topics.RATES, k)
                for k in out.symptoms:
                    await send(topics.SYMPTOMS, k)
                for e in events:
                    processed[e.message.tp] = e.message.offset
            progress.processed("snapshots", len(events) - len(out.rejected))
            progress.processed("values", out.values)

    async def publish(fired: list[Anomaly]) -> None:
        for a in fired:
            await anomalies.send(key=a.fingerprint.encode(), value=encode(a))
        progress.processed("anomalies", len(fired))

    @app.agent(symptoms)
    async def stage2_agent(stream: faust.StreamT) -> None:
        async for events in stream.take_events(opts.batch_max, within=opts.batch_within_s):
            async with stage2_lock:  # one writer at a time keeps each incident's events in order
                for event in events:
                    channel = str(event.message.partition)
                    fired, reason = stage2.feed(event.message.value, time.monotonic(), channel)
                    if reason is not None:
                        await dead_letter(event, reason)
                    await publish(fired)
            progress.processed("symptoms", len(events))

    @app.task
    async def stage1_heartbeat() -> None:
        """Tell stage 2 which of our input partitions have nothing left to read (see Stage1Worker)."""
        while True:
            await asyncio.sleep(opts.heartbeat_s)
            owned = [tp for tp in app.consumer.assignment() if tp.topic == topics.COUNTERS]
            if not owned:
                continue
            ends = await app.consumer.highwaters(*owned)
            async with stage1_lock:
                caught_up = {
                    f"{tp.topic}/{tp.partition}": processed.get(tp, -1) + 1 >= (ends.get(tp) or 0)
                    for tp in owned
                }
                for k in stage1.heartbeat(caught_up):
                    await send(topics.SYMPTOMS, k)

    @app.timer(1.0)
    async def stage2_idle() -> None:
        """Time moves on for incidents when inputs go quiet (see Stage2Worker)."""
        async with stage2_lock:
            await publish(stage2.advance(time.monotonic()))

    @app.task
    async def broadcast_inputs() -> None:
        wait_ms = opts.fetch_max_wait_ms
        consumer = AIOKafkaConsumer(
            **_aiokafka_kwargs(opts.broker), enable_auto_commit=False, fetch_max_wait_ms=wait_ms
        )
        await consumer.start()
        try:
            await _follow_broadcast(consumer, opts, stage1, stage2, topology_seen, progress)
        finally:
            await consumer.stop()

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        progress.joined = True

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        for tp in revoked:
            processed.pop(tp, None)

    async def lag() -> int:
        total = 0
        for tp in app.consumer.assignment():
            try:
                position = await app.consumer.position(tp)
            except KafkaError:  # revoked by a rebalance in the meantime
                continue
            if position is not None:
                total += max(0, (app.consumer.highwater(tp) or 0) - position)
        return total

    @app.page("/ready")
    async def ready(web: Any, request: Any) -> Any:
        ok, detail = progress.readiness()
        return web.json({"ready": ok, "detail": detail}, status=200 if ok else 503)

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        ok, detail = progress.liveness(await lag())
        return web.json(
            {"healthy": ok, "detail": detail, "dead_letters": dict(progress.dead_letters)},
            status=200 if ok else 503,
        )

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.text(progress.prometheus(await lag()), content_type="text/plain; version=0.0.4")

    return app


def _limit_fetch_wait(ms: int) -> None:
    """Faust fixes its consumer's fetch wait at 1.5 s. Kafka answers a fetch as soon as data
    arrives, but some Kafka-protocol brokers (Tansu, the embedded one) hold it for the whole wait,
    which puts up to 1.5 s on each of the two hops between a snapshot and its anomaly. Faust has no
    setting for it, so the consumer it creates gets ours before it starts."""
    thread = faust_aiokafka.AIOKafkaConsumerThread
    original = getattr(thread, "_fabricwatch_original", thread._create_worker_consumer)

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = ms
        return consumer

    thread._fabricwatch_original = original
    thread._create_worker_consumer = create


async def _follow_broadcast(
    consumer: AIOKafkaConsumer,
    opts: WorkerOptions,
    stage1: Stage1Worker,
    stage2: Stage2Worker,
    topology_seen: asyncio.Event,
    progress: Progress,
) -> None:
    """Read the latest topology and the recent phases, then follow both for as long as we run."""
    await consumer.topics()  # metadata of every topic, not only of subscribed ones
    tps = [
        TopicPartition(t, p)
        for t in (topics.TOPOLOGY, topics.PHASES)
        for p in sorted(consumer.partitions_for_topic(t) or [])
    ]
    inputs = sorted(consumer.partitions_for_topic(topics.COUNTERS) or [])
    stage2.expected_sources = tuple(f"{topics.COUNTERS}/{p}" for p in inputs)
    consumer.assign(tps)
    ends = await consumer.end_offsets(tps)
    for tp in tps:
        back = 1 if tp.topic == topics.TOPOLOGY else opts.phases_lookback
        consumer.seek(tp, max(0, ends[tp] - back))
    while True:
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for record in records:
                _apply_broadcast(record.topic, record.value, stage1, stage2, topology_seen, progress)
        if not progress.inputs_ready:
            positions = [await consumer.position(tp) for tp in tps]
            progress.inputs_ready = all(p >= ends[tp] for p, tp in zip(positions, tps, strict=True))


def _apply_broadcast(
    topic: str,
    value: bytes,
    stage1: Stage1Worker,
    stage2: Stage2Worker,
    topology_seen: asyncio.Event,
    progress: Progress,
) -> None:
    expected = Topology if topic == topics.TOPOLOGY else Phase
    try:
        msg = decode(value, expected)
    except DecodeError as exc:
        progress.dead_letter(str(exc))
        return
    if isinstance(msg, Topology):
        stage1.set_topology(msg)
        stage2.set_topology(msg)
        topology_seen.set()
    else:
        stage2.on_phase(msg)
    progress.processed(topic)


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for the topology, but not forever: detection without it is degraded, not impossible."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        event.set()


def _credentials(settings: BrokerSettings) -> Any:
    context = _ssl_context(settings)
    if settings.sasl_mechanism:
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password,
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context) if context is not None else None


def _aiokafka_kwargs(settings: BrokerSettings) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap.split(","),
        "security_protocol": settings.security_protocol,
        "ssl_context": _ssl_context(settings),
    }
    if settings.sasl_mechanism:
        kw.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_plain_username=settings.sasl_username,
            sasl_plain_password=settings.sasl_password,
        )
    return kw


def _ssl_context(settings: BrokerSettings) -> ssl.SSLContext | None:
    if "SSL" not in settings.security_protocol:
        return None
    return ssl.create_default_context(cafile=settings.ssl_cafile)
