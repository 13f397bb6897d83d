"""Stage 1's detector windows on ``fabric.state``: saved for the devices a worker reads, taken up by
the worker that reads them next.

The capacity, microburst and rhythm detectors judge a device over minutes (``detectors/windows.py``).
A worker that takes a partition over, after a restart or a rebalance, would start their windows
from nothing: unable to judge for half a window, and the findings open on the partition's devices
would resolve and fire again. So every ``window_save_s``, when partitions are taken from it and when
it stops, a worker sends each of its devices' windows to ``fabric.state``, keyed by device, in the
partition number of the device's ``fabric.counters`` partition; and when it is given a counters
partition it did not read, it reads the same state partition back over ``LOOKBACK_SAVES`` save
intervals and takes the newest windows of each device. A window older than that is not taken: its
device went unread for longer than it is worth. At least once, as the offsets: a worker that dies
loses what its windows gained since their last save, and the polls after its last commit are
counted again by the next.

Off the rebalance path (``stage1_agent``): a first wiring read the windows back inside the
listener, and every rebalance waited on a consumer of its own; a streaming test that adds and
removes workers lost incidents. Now the listener only holds the new partitions back (paused) and
``restore`` reads in a task of its own, resuming them once their windows are in (or
``LOAD_TIMEOUT_S`` passed): the partitions kept read on meanwhile, and no poll of a new one is
judged before its windows are back. The periodic save runs in a task too; only the save of the
partitions a rebalance takes waits in the listener, bounded by ``SAVE_TIMEOUT_S``, so that the
next owner finds them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import DecodeError, WindowState, decode
from fabricwatch.streams.kafka_io import read_to_end, seek_since
from fabricwatch.streams.stages import Keyed

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker

log = logging.getLogger(__name__)

LOOKBACK_SAVES = 3
"""Save intervals read back: the newest save of every device its last worker read is in them."""
LOAD_TIMEOUT_S = 10.0
"""The most a rebalance waits to read the windows back; past it, it goes on without them."""
SAVE_TIMEOUT_S = 5.0

Send = Callable[[str, bytes, bytes, int], Awaitable[Any]]


class WindowKeeper:
    """Saves through a producer of its own (``send`` replaces it in tests): the worker's, Faust's,
    is already stopped when stage 1's task saves on its way out."""

    def __init__(self, w: Worker, client_kwargs: dict[str, Any], send: Send | None = None) -> None:
        self._w = w
        self._client_kwargs = client_kwargs
        self._send = send or self._produce
        self._producer: AIOKafkaProducer | None = None
        self._last = time.monotonic()

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def run_saves(self, consumer: AIOKafkaConsumer) -> None:
        """Save the windows of the partitions ``consumer`` reads every ``window_save_s``, beside
        the reading (a task of its own: only taking the windows holds stage 1, never the send)."""
        while True:
            await asyncio.sleep(max(0.0, self._last + self._w.opts.window_save_s - time.monotonic()))
            if time.monotonic() - self._last >= self._w.opts.window_save_s:
                await self.save(consumer.assignment())

    async def restore(self, consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition]) -> None:
        """Take the windows of newly assigned ``tps``, which the caller paused, then let
        ``consumer`` read them (those it still reads: a rebalance may have taken some since)."""
        tps = list(tps)
        try:
            await self.load(tps)
        finally:
            consumer.resume(*(set(tps) & consumer.assignment()))

    async def save(self, owned: Iterable[TopicPartition]) -> None:
        """Send the windows of every device read from the ``owned`` counters partitions, within
        ``SAVE_TIMEOUT_S``: a broker away must not hold a rebalance or a stop."""
        self._last = time.monotonic()
        sources = {f"{tp.topic}/{tp.partition}" for tp in owned}
        async with self._w.stage1_lock:
            states = self._w.stage1.windows(sources)
        if not states:
            return
        try:
            await asyncio.wait_for(self._send_all(states), SAVE_TIMEOUT_S)
        except (KafkaError, TimeoutError, AssertionError) as exc:
            # The next save sends them again. (aiokafka asserts on a partition the topic lacks:
            # fabric.state made with fewer partitions than fabric.counters.)
            log.warning("stage 1 could not save the windows of %d devices: %r", len(states), exc)
            return
        self._w.progress.sent[topics.STATE] += len(states)

    async def _send_all(self, states: list[tuple[int, Keyed]]) -> None:
        for partition, message in states:
            await self._send(topics.STATE, message.key, message.value, partition)
        if self._producer is not None:
            await self._producer.flush()  # read back by the next owner as soon as it is given them

    async def load(self, assigned: Iterable[TopicPartition]) -> None:
        """Take the windows saved for the devices of newly ``assigned`` counters partitions."""
        tps = sorted(
            TopicPartition(topics.STATE, tp.partition) for tp in assigned if tp.topic == topics.COUNTERS
        )
        if not tps:
            return
        try:
            newest, bad = await asyncio.wait_for(self._read(tps), LOAD_TIMEOUT_S)
        except (KafkaError, TimeoutError) as exc:
            log.warning(
                "stage 1 could not read the windows of partitions %s: %r", [tp.partition for tp in tps], exc
            )
            return
        async with self._w.stage1_lock:
            taken, refused = self._w.stage1.restore_windows(newest.values())
        if taken:
            log.info("stage 1 took the windows of %d devices from %s", taken, topics.STATE)
        if bad or refused:
            log.warning(
                "stage 1 left %d malformed state records and %d windows it cannot keep, e.g. %s",
                bad,
                len(refused),
                refused[:1] or "a record that is not a window state",
            )

    async def _read(self, tps: list[TopicPartition]) -> tuple[dict[str, WindowState], int]:
        """The newest window state of each device in ``tps`` over the lookback, and how many records
        were malformed."""
        consumer = AIOKafkaConsumer(**self._client_kwargs, enable_auto_commit=False)
        newest: dict[str, WindowState] = {}
        bad = 0
        try:
            await consumer.start()
            consumer.assign(tps)
            await seek_since(consumer, tps, LOOKBACK_SAVES * self._w.opts.window_save_s)
            while True:  # bounded by LOAD_TIMEOUT_S
                batch = await consumer.getmany(timeout_ms=200)
                for record in (r for records in batch.values() for r in records):
                    try:
                        state = decode(record.value, WindowState)
                    except DecodeError:
                        bad += 1
                        continue
                    if state.device not in newest or state.ts_ns >= newest[state.device].ts_ns:
                        newest[state.device] = state
                if not batch and await read_to_end(consumer, tps):
                    break
        finally:
            await consumer.stop()
        return newest, bad

    async def _produce(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        if self._producer is None:
            producer = AIOKafkaProducer(**self._client_kwargs, linger_ms=5)
            await producer.start()
            self._producer = producer
        await self._producer.send(topic, value, key=key, partition=partition)
