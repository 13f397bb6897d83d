"""A worker's topology reader (``streams.broadcast``) against a real broker (Tansu): both stages wait
for it, so it must say when the topology is read, neither too early nor never."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer
from helpers.streaming import topology_and_snapshots, trace

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.topology import TopologyView
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import encode
from fabricwatch.streams import broadcast
from fabricwatch.streams.health import Progress
from fabricwatch.streams.kafka_io import Publisher, ensure_topics
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker

pytestmark = pytest.mark.processes  # broker


def _worker() -> SimpleNamespace:
    """What ``broadcast`` reads and writes of a worker, with the real stages."""
    return SimpleNamespace(
        opts=SimpleNamespace(phases_lookback=10),
        progress=Progress(),
        topology=TopologyView(),
        stage1=Stage1Worker(DetectorConfig()),
        stage2=Stage2Worker(DetectorConfig()),
        topology_seen=asyncio.Event(),
        topology_known=asyncio.Event(),
    )


async def _follow_until_known(bootstrap: str, w: SimpleNamespace, within_s: float) -> bool:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    task = asyncio.create_task(broadcast._follow(consumer, w))
    try:
        await asyncio.wait_for(w.topology_known.wait(), within_s)
        return True
    except TimeoutError:
        return False
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()


def test_no_topology_published_is_known_at_once(broker):
    """A fabric without a topology publisher waits only a short while for a first one, not as
    long as for a broker that does not answer."""
    ensure_topics(broker)
    w = _worker()
    assert asyncio.run(_follow_until_known(broker.bootstrap, w, 5.0))
    assert not w.topology_seen.is_set() and not w.topology.merged().devices


def test_the_topology_is_applied_before_it_is_said_read(broker, tmp_path):
    """One message, in one batch: Tansu answers ListOffsets with that batch's start (0), which
    alone would call the topic empty and let stage 1 route symptoms before it has pods."""
    ensure_topics(broker)
    topology, _ = topology_and_snapshots(trace(tmp_path, duration=3))
    pub = Publisher(broker)
    pub.send(topics.TOPOLOGY, "fabric", encode(topology))
    pub.close()
    w = _worker()
    assert asyncio.run(_follow_until_known(broker.bootstrap, w, 10.0))
    assert w.topology_seen.is_set()
    assert {d.id for d in w.topology.merged().devices} == {d.id for d in topology.devices}
