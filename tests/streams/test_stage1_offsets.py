"""Where stage 1's consumer starts a partition it is newly given, against a real broker (Tansu)."""

from __future__ import annotations

import asyncio
import time

import faust
from aiokafka import AIOKafkaConsumer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.schemas import topics
from fabricwatch.streams import stage1_agent
from fabricwatch.streams.faust_app import _aiokafka_kwargs
from fabricwatch.streams.health import Progress
from fabricwatch.streams.kafka_io import ensure_topics
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker
from fabricwatch.streams.window_keeper import WindowKeeper
from fabricwatch.streams.worker_context import Worker, WorkerOptions

EARLIER, LATER = 40, 40
"""Records per partition the earlier build processed, and records after them."""


class _SlowBroker(stage1_agent._Offsets):
    """Asks for the earlier build's offsets a second late, as a loaded broker answers: long enough
    for aiokafka's fetcher to fetch the partitions from wherever it would start them."""

    async def _earlier_build(self, tps):
        await asyncio.sleep(1.0)
        return await super()._earlier_build(tps)


def test_a_new_partition_hands_out_nothing_before_it_starts_where_the_earlier_build_left_it(broker):
    ensure_topics(broker, [topics.COUNTERS, topics.STATE])
    producer = KafkaProducer(**broker.kafka_kwargs())
    parts = sorted(producer.partitions_for(topics.COUNTERS))
    for p in parts:
        for _ in range(EARLIER + LATER):
            producer.send(topics.COUNTERS, b"x", partition=p)
    producer.close()
    old = KafkaConsumer(group_id="fabricwatch", enable_auto_commit=False, **broker.kafka_kwargs())
    old.commit({TopicPartition(topics.COUNTERS, p): OffsetAndMetadata(EARLIER, "", -1) for p in parts})
    old.close()

    got = asyncio.run(_first_offsets(broker, len(parts) * LATER))

    assert min(got) == EARLIER  # nothing the earlier build had processed
    assert len(got) == len(parts) * LATER


async def _first_offsets(broker, want: int) -> list[int]:
    """The offsets stage 1's consumer hands out, until ``want`` or 30 s."""
    opts = WorkerOptions(broker)
    w = Worker(
        opts,
        faust.App(opts.app_id, broker=f"kafka://{broker.bootstrap}"),
        Progress(),
        Stage1Worker(DetectorConfig()),
        Stage2Worker(DetectorConfig()),
    )
    kw = _aiokafka_kwargs(broker)
    consumer = AIOKafkaConsumer(
        group_id=stage1_agent.group_id(opts.app_id),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        **kw,
    )
    await consumer.start()
    consumer.subscribe([topics.COUNTERS], listener=_SlowBroker(w, consumer, kw, WindowKeeper(w, kw)))
    got: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=100)
            got += [r.offset for rs in batch.values() for r in rs]
    finally:
        await consumer.stop()
    return got
