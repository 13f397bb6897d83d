"""The job stage in a worker: the jobs whose ``fabric.phases`` partitions it owns, judged against
the fabric's incidents as far as every stage 2 has judged (``job_worker``).

Job ownership is a consumer group of its own (``<app_id>-jobs``), beside stage 1's and Faust's:
phases are keyed by job, so each job has one owner. Nothing is committed: an owner, new or
restarted, reads each partition's last ``phases_lookback`` records again, which rebuilds the
jobs' baselines (the last 20 occurrences of each call, at most a few thousand records) and
carries their open incidents on under the same fingerprints. The fabric's incidents and stage
2's progress are read by every worker, with no group, from the last ``ANOMALY_LOOKBACK``
records of each partition (the incidents open now).

A progress mark is taken only once every ``fabric.anomalies`` partition has been read up to its
high watermark as of the fetch that brought the mark: stage 2 flushes its incidents before it
sends the mark, so none that the mark covers is still unread.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, PhaseMessage, Watermark, decode, encode
from fabricwatch.streams.job_worker import JobWorker
from fabricwatch.streams.kafka_io import placed
from fabricwatch.streams.stages import Keyed

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker

log = logging.getLogger(__name__)

ANOMALY_LOOKBACK = 10_000
"""Incident events re-read per ``fabric.anomalies`` partition at start."""


def group_id(app_id: str) -> str:
    """The consumer group that shares the jobs out among workers."""
    return f"{app_id}-jobs"


def wire(w: Worker, client_kwargs: dict[str, Any]) -> None:
    app, opts = w.app, w.opts

    @app.task
    async def jobs_input() -> None:
        fabric = AIOKafkaConsumer(**client_kwargs, enable_auto_commit=False)
        await fabric.start()
        await fabric.topics()
        w.jobs = JobWorker(opts.config, stall_after_s=opts.stall_source_s)
        incidents = _partitions(fabric, topics.ANOMALIES)
        progress = _partitions(fabric, topics.PROGRESS)
        fabric.assign(incidents + progress)
        ends = await fabric.end_offsets(incidents + progress)
        for tp in incidents:
            fabric.seek(tp, max(0, ends[tp] - ANOMALY_LOOKBACK))
        for tp in progress:
            fabric.seek(tp, ends[tp])
        phases = AIOKafkaConsumer(
            **client_kwargs,
            group_id=group_id(opts.app_id),
            enable_auto_commit=False,
            **opts.group_timeouts(),
        )
        owners = _Owners(w, phases)
        await phases.start()
        phases.subscribe([topics.PHASES], listener=owners)
        pending: list[tuple[Watermark, dict[TopicPartition, int]]] = []
        try:
            while True:
                for tp, records in (await phases.getmany(timeout_ms=100)).items():
                    for r in records:
                        owners.read(tp, r, w)
                for tp, records in (await fabric.getmany(timeout_ms=100)).items():
                    for r in records:
                        if tp.topic == topics.ANOMALIES:
                            _incident(r.value, w)
                        elif (mark := _mark(r.value, w)) is not None:
                            pending.append((mark, {i: fabric.highwater(i) or 0 for i in incidents}))
                wall = time.monotonic()
                positions = {tp: await fabric.position(tp) for tp in incidents}
                while pending and all(positions[tp] >= end for tp, end in pending[0][1].items()):
                    w.jobs.on_progress(pending.pop(0)[0], wall)
                for a in w.jobs.advance(wall):
                    await w.send(topics.ANOMALIES, Keyed(a.fingerprint.encode(), encode(a)))
                    w.progress.processed("anomalies", 1)
                if w.jobs.now_ns and (change := w.progress.input_age("jobs", w.jobs.now_ns / 1e9)):
                    log.warning("%s", change)  # /healthz says how far behind the jobs are judged
        finally:
            await phases.stop()
            await fabric.stop()


class _Owners(ConsumerRebalanceListener):
    """Which jobs this worker owns: those of the phases partitions assigned to it, each read again
    from ``phases_lookback`` records back; jobs of a revoked partition are forgotten."""

    def __init__(self, w: Worker, consumer: AIOKafkaConsumer) -> None:
        self._w = w
        self._consumer = consumer
        self._jobs: dict[TopicPartition, set[str]] = {}

    def read(self, tp: TopicPartition, record: Any, w: Worker) -> None:
        try:
            msg = decode(record.value, PhaseMessage)  # type: ignore[arg-type]
        except DecodeError:
            return  # counted and said once, by the worker's phases reader (``broadcast``)
        self._jobs.setdefault(tp, set()).add(msg.job)
        w.jobs.on_phase(msg, record.timestamp * 1_000_000)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        gone = set().union(*(self._jobs.pop(tp, set()) for tp in revoked))
        if gone:
            self._w.jobs.forget(gone)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        tps = sorted(assigned)
        if not tps:
            return
        async with placed(self._consumer, tps):
            ends = await self._consumer.end_offsets(tps)
            for tp in tps:
                self._consumer.seek(tp, max(0, ends[tp] - self._w.opts.phases_lookback))


def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]


def _incident(value: bytes, w: Worker) -> None:
    """An incident event; a malformed one is counted and said by the sink and the alerter, whose
    input it is, not again here."""
    with contextlib.suppress(DecodeError):
        w.jobs.on_anomaly(decode(value, Anomaly))  # type: ignore[arg-type]


def _mark(value: bytes, w: Worker) -> Watermark | None:
    try:
        return decode(value, Watermark)  # type: ignore[arg-type]
    except DecodeError:
        return None  # not stage 2's: nothing the job stage can wait for
