"""Stage 1 in a worker: ``fabric.counters`` in batches through its own consumer, rates and symptoms
out, and the heartbeat that tells stage 2 which input partitions are read to their end.

Stage 1 reads with a plain aiokafka consumer, not a Faust agent. Faust hands an agent one event at
a time: for every message its consumer makes two tasks (``wait_first`` of the callback and the
flow-control wait) and its stream yields to the loop once. Measured under the streaming bench's
load, that was about 110 µs a message, 58-62 % of a worker, where stage 1's own work on a NIC
snapshot is 15-20 µs; ``getmany`` hands over a whole fetch in one call. Stage 2 stays a Faust
agent: it reads one symptoms message per pod and batch, a few hundred times fewer messages.

The consumer is in a group of its own, ``<app id>-stage1``: Faust's group assigns with Faust's own
protocol, which a plain consumer cannot join. It commits what stage 1 processed after flushing the
producer, so a crash redelivers, never skips (at least once): every ``COMMIT_INTERVAL_S`` and when
the worker stops. A partition that has no offset in this group starts at the offset the Faust group
(``<app id>``) committed for it, where workers of earlier builds read counters, so an upgrade
neither skips nor re-reads the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fabricwatch.schemas import topics
from fabricwatch.streams.kafka_io import log_ends_aio, placed
from fabricwatch.streams.window_keeper import WindowKeeper

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aiokafka.structs import ConsumerRecord

    from fabricwatch.streams.worker_context import Worker

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 1.0
"""How much input a crash makes the next owner read again, at most (Faust's default was 2.8 s)."""


def group_id(app_id: str) -> str:
    """The consumer group stage 1 reads ``fabric.counters`` in."""
    return f"{app_id}-stage1"


def wire(w: Worker, client_kwargs: dict[str, Any]) -> None:
    app, opts = w.app, w.opts
    started = asyncio.Event()

    @app.task
    async def stage1_input() -> None:
        consumer = AIOKafkaConsumer(
            **client_kwargs,
            group_id=group_id(opts.app_id),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=opts.fetch_max_wait_ms,
            max_partition_fetch_bytes=opts.max_message_bytes + 1024 * 1024,
            **opts.group_timeouts(),
        )
        windows = WindowKeeper(w, client_kwargs)
        offsets = _Offsets(w, consumer, client_kwargs, windows)
        await consumer.start()
        w.stage1_consumer = consumer
        started.set()
        consumer.subscribe([topics.COUNTERS], listener=offsets)
        saves = asyncio.create_task(windows.run_saves(consumer))
        try:
            while True:
                assignment = offsets.assignment
                batch = await consumer.getmany(timeout_ms=200, max_records=opts.batch_max)
                if batch:
                    await _process(w, batch, offsets, assignment)
                await offsets.commit_due()
        finally:
            saves.cancel()
            await offsets.stop_restoring()
            await windows.save(consumer.assignment())  # the next owner's windows as this one leaves them
            await windows.close()
            await offsets.commit()
            await consumer.stop()

    @app.task
    async def stage1_heartbeat() -> None:
        """Tell stage 2 which of our input partitions have nothing left to read (see Stage1Worker).

        Not before the topology is read: until then stage 1 knows no pod but the unknown one, and
        a watermark sent to its symptoms partition alone would tell stage 2 of a partition heard
        there and nowhere else (``Stage2Worker``)."""
        await started.wait()
        await w.topology_read()
        consumer = w.stage1_consumer
        while True:
            await asyncio.sleep(opts.heartbeat_s)
            owned = sorted(consumer.assignment())
            if not owned:
                continue
            try:
                ends = await log_ends_aio(consumer, owned)
            except KafkaError as exc:  # a rebalance or a broker away: the next beat asks again
                log.debug("no end offsets for the heartbeat: %r", exc)
                continue
            async with w.stage1_lock:
                caught_up = {
                    f"{tp.topic}/{tp.partition}": w.processed.get(tp, -1) + 1 >= (ends.get(tp) or 0)
                    for tp in owned
                }
                for k in w.stage1.heartbeat(caught_up):
                    await w.send(topics.SYMPTOMS, k)


async def _process(
    w: Worker, batch: Mapping[TopicPartition, list[ConsumerRecord]], offsets: _Offsets, assignment: int
) -> None:
    """One fetch through stage 1; its output handed to the producer before its offsets count as done,
    and only if no rebalance came in between (``assignment``)."""
    await w.topology_read()
    records = [r for rs in batch.values() for r in rs]
    sources = [s for tp, rs in batch.items() for s in [f"{tp.topic}/{tp.partition}"] * len(rs)]
    async with w.stage1_lock:
        began = time.thread_time()
        out = w.stage1.process([r.value for r in records], sources)
        w.progress.core_cpu_s["stage1"] += time.thread_time() - began
        for r in out.rejected:
            await w.dead_letter(records[r.index], r.reason)
        for reason in out.clock_drops:
            w.progress.dead_letter(reason)
        for k in out.rates:
            await w.send(topics.RATES, k)
        for k in out.periods:
            await w.send(topics.RHYTHM, k)
        for k in out.symptoms:
            await w.send(topics.SYMPTOMS, k)
        if assignment == offsets.assignment:
            w.processed.update((tp, rs[-1].offset) for tp, rs in batch.items())
    w.progress.processed("snapshots", len(records) - len(out.rejected))
    w.progress.processed("values", out.values)
    if change := w.progress.input_age("stage1", records[-1].timestamp / 1000):
        log.warning("%s", change)


class _Offsets(ConsumerRebalanceListener):
    """Commits what stage 1 processed, and says where a newly assigned partition starts.

    Nothing is committed when partitions are revoked: that runs inside the group's rejoin, and when
    the rejoin follows a broker that came back empty (the embedded broker, a rebuilt cluster), the
    commit would land the old log's offsets in the new one, whose records below them would then be
    skipped (seen: the first polls of a PFC storm lost, the storm rooted at the leaves). The next
    owner reads again what came after the last periodic commit, at most ``COMMIT_INTERVAL_S``."""

    def __init__(
        self, w: Worker, consumer: AIOKafkaConsumer, client_kwargs: dict[str, Any], windows: WindowKeeper
    ) -> None:
        self._w = w
        self._consumer = consumer
        self._client_kwargs = client_kwargs
        self._windows = windows
        self._owned: set[TopicPartition] = set()
        """The partitions of the last assignment: a rebalance gives them again with the new ones."""
        self._restoring: asyncio.Task[None] | None = None
        self._committed: dict[TopicPartition, int] = {}
        self._last = time.monotonic()
        self.assignment = 0
        """Counts rebalances: offsets of a batch fetched before one are not the new assignment's."""

    async def commit_due(self) -> None:
        if time.monotonic() - self._last >= COMMIT_INTERVAL_S:
            await self.commit()

    async def commit(self) -> None:
        """Flush the producer, then commit the offsets processed since the last commit."""
        self._last = time.monotonic()
        owned = self._consumer.assignment()
        done = {
            tp: offset + 1
            for tp, offset in self._w.processed.items()
            if tp in owned and self._committed.get(tp) != offset + 1
        }
        if not done or not self._member():
            return
        try:
            await self._w.app.producer.flush()
            await self._consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in done.items()})
        except KafkaError as exc:  # a rebalance took them: the next owner reads them again
            log.warning("stage 1 could not commit %d partitions' offsets: %r", len(done), exc)
            return
        self._committed.update(done)

    def _member(self) -> bool:
        """Whether the consumer is a member of its group's current generation. After an unknown
        member error aiokafka resets its generation to -1 at once, but calls the revoke only after
        it has found the coordinator again; a commit in between goes out with generation -1, which
        a broker that came back empty takes as the commit of a consumer outside any group. aiokafka
        has no public accessor for the generation."""
        return self._consumer._coordinator.generation >= 0

    async def stop_restoring(self) -> None:
        """Cancel a restore under way; its partitions are resumed before this returns, never after
        the next assignment paused them again."""
        if self._restoring is not None:
            self._restoring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restoring
            self._restoring = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """The windows of what is taken are saved for its next owner (bounded: ``SAVE_TIMEOUT_S``)."""
        await self.stop_restoring()
        await self._windows.save(revoked)
        async with self._w.stage1_lock:  # the batch in hand is finished first
            self.assignment += 1
            for tp in revoked:
                self._w.processed.pop(tp, None)
                self._committed.pop(tp, None)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        """Start each new partition where this group, or else an earlier build, left it, and hold
        the partitions this worker did not read back until their windows are read (``restore``)."""
        new = set(assigned) - self._owned
        self._owned = set(assigned)
        self._consumer.pause(*new)
        async with placed(self._consumer, set(assigned) - new):
            self._w.progress.joined.add("stage1")
            async with self._w.stage1_lock:  # devices now read elsewhere are no longer timed here
                self._w.stage1.keep_sources({f"{tp.topic}/{tp.partition}" for tp in assigned})
            fresh = [tp for tp in assigned if await self._consumer.committed(tp) is None]
            for tp, offset in (await self._earlier_build(fresh)).items():
                log.info("stage 1 starts %s/%d at offset %d, committed by an earlier build", *tp, offset)
                self._consumer.seek(tp, offset)
        if new:
            self._restoring = asyncio.create_task(self._windows.restore(self._consumer, new))

    async def _earlier_build(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Offsets the Faust group committed for ``tps``, where earlier builds read counters."""
        if not tps:
            return {}
        admin = AIOKafkaAdminClient(**self._client_kwargs)
        try:
            await admin.start()
            found = await admin.list_consumer_group_offsets(self._w.opts.app_id, partitions=tps)
        except KafkaError as exc:
            log.warning("no offsets of an earlier build for %d partitions: %r", len(tps), exc)
            return {}
        finally:
            await admin.close()
        return {tp: o.offset for tp, o in found.items() if o.offset >= 0}
