"""Topology and phases in a worker: small, and every worker needs all of them, so each worker reads
them with its own group-less consumer (Faust would split them across workers like any topic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import DecodeError, PhaseMessage, Topology, decode
from fabricwatch.streams.kafka_io import read_to_end

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker


def wire(w: Worker, client_kwargs: dict[str, Any]) -> None:
    @w.app.task
    async def broadcast_inputs() -> None:
        consumer = AIOKafkaConsumer(
            **client_kwargs, enable_auto_commit=False, fetch_max_wait_ms=w.opts.fetch_max_wait_ms
        )
        await consumer.start()
        try:
            await _follow(consumer, w)
        finally:
            await consumer.stop()


async def _follow(consumer: AIOKafkaConsumer, w: Worker) -> None:
    """Read the latest topology and the recent phases, then follow both for as long as we run.

    ``topology_known`` is set once the topology is read to its end (applied, or found empty),
    ``topology_seen`` once one is applied. Both stages wait for them (``Worker.topology_read``):
    a symptom read before the topology goes to the wrong pod's stage 2 and is judged there
    without the links that tie a pause to its root. Found: a worker that joined under load read
    counters before the topology, and a leaf paused by a NIC's storm became a storm of its own."""
    await consumer.topics()  # metadata of every topic, not only of subscribed ones
    tps = [
        TopicPartition(t, p)
        for t in (topics.TOPOLOGY, topics.PHASES)
        for p in sorted(consumer.partitions_for_topic(t) or [])
    ]
    inputs = sorted(consumer.partitions_for_topic(topics.COUNTERS) or [])
    w.stage2.expected_sources = tuple(f"{topics.COUNTERS}/{p}" for p in inputs)
    topology = [tp for tp in tps if tp.topic == topics.TOPOLOGY]
    consumer.assign(tps)
    starts = await consumer.end_offsets(tps)
    for tp in tps:
        back = 1 if tp.topic == topics.TOPOLOGY else w.opts.phases_lookback
        consumer.seek(tp, max(0, starts[tp] - back))
    while True:
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for record in records:
                _apply(record.topic, record.value, w)
        if not w.topology_known.is_set() and await read_to_end(consumer, topology):
            w.topology_known.set()
        if not w.progress.inputs_ready:
            w.progress.inputs_ready = await read_to_end(consumer, tps)


def _apply(topic: str, value: bytes, w: Worker) -> None:
    expected = Topology if topic == topics.TOPOLOGY else PhaseMessage
    try:
        msg = decode(value, expected)
    except DecodeError as exc:
        w.progress.dead_letter(str(exc))
        return
    if isinstance(msg, Topology):
        merged = w.topology.add(msg)
        w.stage1.set_topology(merged)
        w.stage2.set_topology(merged)
        w.topology_seen.set()
    else:
        w.stage2.on_phase(msg)
    w.progress.processed(topic)
