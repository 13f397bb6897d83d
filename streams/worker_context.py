"""What the parts of one worker share: its options, stages, progress and processed offsets."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.detectors.topology import TopologyView
from fabricwatch.schemas import topics
from fabricwatch.streams.health import Progress
from fabricwatch.streams.kafka_io import BrokerSettings
from fabricwatch.streams.stages import DEFAULT_MAX_MESSAGE_BYTES, Keyed, Stage1Worker, Stage2Worker

log = logging.getLogger(__name__)

TOPOLOGY_FIRST_S = 5.0
"""How long the stages wait for a first topology when none is published yet."""

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
    topology_wait_s: float = 30.0
    """How long both stages wait at start for the topology topic to be read to its end before they
    go on without one (a broker that does not answer)."""
    fetch_max_wait_ms: int = 100
    heartbeat_s: float = 0.2
    """How often stage 1 tells stage 2 which partitions it has read to the end (latency at the end
    of each poll's burst)."""
    stall_source_s: float = 30.0
    """An input partition with lag that stays this long without progress stops holding stage 2
    back (see Stage2Worker); at least twice the session timeout, so a takeover loses nothing."""
    window_save_s: float = 60.0
    """How often stage 1 saves its detector windows to ``fabric.state`` (``window_keeper``); also on
    stop and when partitions are taken from it."""
    phases_lookback: int = 10_000
    """Phases re-read at start per partition: stage 2 only needs the ones still running."""

    def group_timeouts(self) -> dict[str, int]:
        """The group timings of the worker's own aiokafka consumers (stage 1's, the jobs'), as
        Faust's group has them: a dead worker's partitions move after ``session_timeout_s``."""
        return {
            "session_timeout_ms": int(self.session_timeout_s * 1000),
            "heartbeat_interval_ms": int(max(self.session_timeout_s / 6, 0.5) * 1000),
            "rebalance_timeout_ms": int(self.session_timeout_s * 1000),
            "max_poll_interval_ms": int(max(self.session_timeout_s, 30.0) * 1000),
        }


@dataclass
class Worker:
    """What the agents, tasks and pages of one worker share: its stages, its progress and the
    offsets it has processed. Built by ``make_app``; the wiring lives in ``stage1_agent``,
    ``stage2_agent``, ``broadcast`` and ``web``."""

    opts: WorkerOptions
    app: faust.App
    progress: Progress
    stage1: Stage1Worker
    stage2: Stage2Worker
    stage1_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """A heartbeat's watermark must not overtake a batch's symptoms."""
    stage2_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One writer at a time keeps each incident's events in order."""
    topology_seen: asyncio.Event = field(default_factory=asyncio.Event)
    """A topology was applied (or the stages gave up waiting for one)."""
    topology_known: asyncio.Event = field(default_factory=asyncio.Event)
    """The topology topic was read to its end, whether it held one or not."""
    topology: TopologyView = field(default_factory=TopologyView)
    """The whole fabric's topology with each host's LLDP report merged in."""
    processed: dict[Any, int] = field(default_factory=dict)
    """The last offset processed per counters partition (for the caught-up heartbeat and commits)."""
    stage1_consumer: Any = None
    """Stage 1's own consumer of ``fabric.counters`` (``stage1_agent``), beside Faust's."""
    jobs: Any = None
    """The job stage of the jobs this worker owns (``job_agent``), once it has started."""

    def __post_init__(self) -> None:
        self._deadletter = self.app.topic(topics.DEADLETTER)

    async def topology_read(self) -> None:
        """Wait until the topology the broker holds is applied (``broadcast``). Found empty, wait
        ``TOPOLOGY_FIRST_S`` more for a first one: a fabric's first records (a replay, collectors
        started after the workers) bring it just before their counters. Not forever: detection
        without it is degraded, not impossible, and the log says so."""
        if self.topology_seen.is_set():
            return
        try:
            await asyncio.wait_for(self.topology_known.wait(), self.opts.topology_wait_s)
            await asyncio.wait_for(self.topology_seen.wait(), TOPOLOGY_FIRST_S)
        except TimeoutError:
            log.warning(
                "no topology read from %s (%s): going on without one; symptoms go to stage 2 "
                "without their pod, and pauses are not traced to their root",
                topics.TOPOLOGY,
                "none published" if self.topology_known.is_set() else "the broker did not answer",
            )
            self.topology_seen.set()

    async def send(self, topic: str, message: Keyed) -> None:
        """Straight to the producer: the values are bytes already, and at one rates message per
        snapshot Faust's channel layer (serialisers, callbacks) costs more than the send itself."""
        await self.app.producer.send(topic, message.key, message.value, None, None, None)
        self.progress.sent[topic] += 1

    async def dead_letter(self, m: Any, reason: str) -> None:
        """A consumed message (Faust's or aiokafka's: topic, partition, offset, key, value) to the
        dead-letter topic with its reason and origin in headers."""
        self.progress.dead_letter(reason)
        headers = [
            ("reason", reason.encode()),
            ("topic", m.topic.encode()),
            ("partition", str(m.partition).encode()),
            ("offset", str(m.offset).encode()),
        ]
        try:
            await self._deadletter.send(key=m.key, value=m.value, headers=headers)
        except ProducerSendError:
            # Too big even for the dead-letter topic: keep its head, and say so.
            headers.append(("truncated_from", str(len(m.value or b"")).encode()))
            await self._deadletter.send(key=m.key, value=(m.value or b"")[:DEAD_LETTER_HEAD], headers=headers)

    async def lag(self) -> int:
        """Messages waiting on this worker's partitions, of both stages."""
        total = 0
        for consumer in (self.app.consumer, self.stage1_consumer):
            for tp in consumer.assignment() if consumer is not None else ():
                try:
                    position = await consumer.position(tp)
                except KafkaError:  # revoked by a rebalance in the meantime
                    continue
                if position is not None:
                    total += max(0, (consumer.highwater(tp) or 0) - position)
        return total
