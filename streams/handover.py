"""Stage 2's open incidents across a rebalance or a restart.

A pod's symptoms go to one partition of ``fabric.symptoms`` (keyed by pod), and whichever worker
owns that partition runs the pod's stage 2. Nothing is changelogged, and the symptoms alone do not
rebuild everything: a storm's root can stop being said (its pause-storm warning is counted once)
while the ports it paused unwind hop by hop, and an incident whose symptoms ended during the
handover has nobody left to resolve it. The incidents themselves are on ``fabric.anomalies``, so a
worker that gains a pod's partition adopts the pod's open incidents from there (the latest event
of each fingerprint in ``ADOPT_LOOKBACK_S``), and one that loses it forgets them without resolving
them. Found (issue 32): with a worker joining and leaving beside two others, a leaf paused by a
NIC's storm became a storm of its own at the pod's new owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, decode
from fabricwatch.streams.kafka_io import read_to_end, seek_since
from fabricwatch.streams.stages import UNKNOWN_POD

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker

log = logging.getLogger(__name__)

ADOPT_LOOKBACK_S = 24 * 3600.0
"""How far back ``fabric.anomalies`` is read for open incidents; one opened earlier and still
open is fired again by its new owner (same fingerprint) instead of adopted."""

HANDOVER_TIMEOUT_S = 10.0
"""The most a rebalance waits for the handover; past it, the worker goes on as before (new
incidents are fired again by their symptoms) and says so."""


def wire(w: Worker, client_kwargs: dict[str, Any]) -> None:
    owned: set[int] = set()

    @w.app.on_partitions_assigned.connect
    async def hand_over_on_assignment(sender: Any, assigned: Any, **kwargs: Any) -> None:
        nonlocal owned
        now = {tp.partition for tp in assigned if tp.topic == topics.SYMPTOMS}
        gained, lost = now - owned, owned - now
        owned = now
        if not gained and not lost:
            return
        try:
            await asyncio.wait_for(_hand_over(w, client_kwargs, now, gained, lost), HANDOVER_TIMEOUT_S)
        except (TimeoutError, KafkaError) as exc:
            log.warning("stage 2 handover of symptoms partitions %s incomplete: %r", sorted(gained), exc)


async def _hand_over(
    w: Worker, client_kwargs: dict[str, Any], now: set[int], gained: set[int], lost: set[int]
) -> None:
    # The topology as the broker holds it, without the stages' wait for a first one: a rebalance
    # must not sit out that wait (none published yet: every device is in the unknown pod).
    await w.topology_known.wait()
    consumer = AIOKafkaConsumer(**client_kwargs, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()
        partition = _partitioner(w, len(consumer.partitions_for_topic(topics.SYMPTOMS) or ()))
        correlator = w.stage2.core.correlator
        async with w.stage2_lock:
            released = w.stage2.hand_over({str(p) for p in lost}, lambda device: partition(device) in now)
        adopted = 0
        if gained:
            events = await _recent_anomalies(consumer)
            async with w.stage2_lock:
                adopted = correlator.adopt(events, lambda device: partition(device) in gained)
        log.info(
            "stage 2 now owns symptoms partitions %s: adopted %d open incidents, handed over %d",
            sorted(now),
            adopted,
            released,
        )
    finally:
        await consumer.stop()


def _partitioner(w: Worker, n: int) -> Callable[[str], int]:
    """The symptoms partition of a device: its pod's key, placed as the producer places it."""
    pods = {d.id: d.pod or UNKNOWN_POD for d in w.topology.merged().devices}
    place, every = DefaultPartitioner(), list(range(max(n, 1)))
    cache: dict[str, int] = {}

    def partition(device: str) -> int:
        pod = pods.get(device, UNKNOWN_POD)
        if pod not in cache:
            cache[pod] = place(pod.encode(), every, every)
        return cache[pod]

    return partition


async def _recent_anomalies(consumer: AIOKafkaConsumer) -> list[Anomaly]:
    """Every anomaly event of the last ``ADOPT_LOOKBACK_S`` on ``fabric.anomalies``."""
    tps = [
        TopicPartition(topics.ANOMALIES, p)
        for p in sorted(consumer.partitions_for_topic(topics.ANOMALIES) or ())
    ]
    if not tps:
        return []
    consumer.assign(tps)
    await seek_since(consumer, tps, ADOPT_LOOKBACK_S)
    out: list[Anomaly] = []
    while True:  # bounded by HANDOVER_TIMEOUT_S
        batch = await consumer.getmany(timeout_ms=200)
        for records in batch.values():
            for record in records:
                try:
                    out.append(decode(record.value, Anomaly))
                except DecodeError:
                    continue  # a malformed record: the sink and the alerter skip it too
        if await read_to_end(consumer, tps):
            return out
