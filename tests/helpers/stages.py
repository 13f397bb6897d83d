"""A trace through the in-process pipeline, and through stage 1 in batches over partitions as a broker
would split them."""

from __future__ import annotations

import zlib
from pathlib import Path

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    PhaseMessage,
    Snapshot,
    Topology,
    decode,
)
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker

PARTITIONS = 4


def in_process(path: Path) -> list[tuple[str, str, str, int]]:
    result = replay_trace(path, Pipeline(DetectorConfig()), lambda events: None)
    return [(a.kind, a.status, a.root.device, a.start_ns) for a in result.anomalies]


def _read(
    path: Path, stage1: Stage1Worker, stage2: Stage2Worker, sources: list[str]
) -> list[tuple[str, bytes]]:
    """The trace's counters as (input partition, message), a broker's split; its topology and
    phases applied to both stages."""
    counters = []
    with TraceReader(path) as reader:
        for rec in reader:
            if rec.topic == topics.COUNTERS:
                counters.append((sources[zlib.crc32(rec.key.encode()) % PARTITIONS], rec.value()))
            elif rec.topic == topics.TOPOLOGY:
                topo = decode(rec.value(), Topology)
                stage1.set_topology(topo)
                stage2.set_topology(topo)
            elif rec.topic == topics.PHASES:
                stage2.on_phase(decode(rec.value(), PhaseMessage))
    return counters


def partition_of(device: str) -> str:
    return f"{topics.COUNTERS}/{zlib.crc32(device.encode()) % PARTITIONS}"


def live(path: Path, late: set[str], lag_s: float, from_s: float) -> list[tuple[str, str, str, int]]:
    """The trace as it would stream live: each counter read when stamped, those of the ``late``
    input partitions ``lag_s`` later from ``from_s`` into the trace on (a producer's batch held
    back), every partition caught up between reads, stage 2 told every 0.1 s of wall time."""
    config = DetectorConfig()
    stage1 = Stage1Worker(config)
    sources = [f"{topics.COUNTERS}/{i}" for i in range(PARTITIONS)]
    stage2 = Stage2Worker(config, expected_sources=sources)
    counters = _read(path, stage1, stage2, sources)
    start = decode(counters[0][1], Snapshot).ts_ns
    arrivals = []
    for source, value in counters:
        at = (decode(value, Snapshot).ts_ns - start) / 1e9
        arrivals.append((at + (lag_s if source in late and at >= from_s else 0.0), source, value))
    arrivals.sort(key=lambda a: a[0])
    fired = []
    step = 0
    while arrivals:
        wall = step * 0.1
        now = [a for a in arrivals if a[0] <= wall]
        arrivals = arrivals[len(now) :]
        out = stage1.process([v for _, _, v in now], [s for _, s, _ in now])
        for k in out.symptoms + stage1.heartbeat(dict.fromkeys(sources, True)):
            events, reason = stage2.feed(k.value, wall, channel=k.key.decode())
            assert reason is None
            fired += events
        fired += stage2.advance(wall)
        step += 1
    fired += stage2.advance(step * 0.1 + 60)
    return [(a.kind, a.status, a.root.device, a.start_ns) for a in fired]


def topology_late(path: Path, late: set[str], late_by_s: float) -> list[tuple[str, str, str, int]]:
    """The trace published at once, 10 s after stage 2 started, read by two stage-1 workers: one
    reads every input partition but ``late`` as soon as they are there, the other reads the
    topology and its partitions ``late_by_s`` later (a worker that joined under load)."""
    config = DetectorConfig()
    early, slow = Stage1Worker(config), Stage1Worker(config)
    sources = [f"{topics.COUNTERS}/{i}" for i in range(PARTITIONS)]
    stage2 = Stage2Worker(config, expected_sources=sources)
    counters = _read(path, early, stage2, sources)
    fired = stage2.advance(0.0)  # a worker's idle timer runs from its start
    for worker, wall, theirs in ((early, 10.0, set(sources) - late), (slow, 10.0 + late_by_s, late)):
        if worker is slow:
            slow.set_topology(_topology(path))
        mine = [(s, v) for s, v in counters if s in theirs]
        out = worker.process([v for _, v in mine], [s for s, _ in mine])
        for k in out.symptoms + worker.heartbeat(dict.fromkeys(theirs, True)):
            events, reason = stage2.feed(k.value, wall, channel=k.key.decode())
            assert reason is None
            fired += events
        fired += stage2.advance(wall)
    fired += stage2.advance(70.0)
    return [(a.kind, a.status, a.root.device, a.start_ns) for a in fired]


def _topology(path: Path) -> Topology:
    with TraceReader(path) as reader:
        return next(decode(r.value(), Topology) for r in reader if r.topic == topics.TOPOLOGY)


def streamed(path: Path, batch: int, order: str) -> tuple[list, Stage2Worker]:
    """Stage 1 in batches over partitions as a broker would split them, stage 2 behind it; the
    partitions interleaved as ``order`` says."""
    config = DetectorConfig()
    stage1 = Stage1Worker(config)
    sources = [f"{topics.COUNTERS}/{i}" for i in range(PARTITIONS)]
    stage2 = Stage2Worker(config, expected_sources=sources)
    counters = _read(path, stage1, stage2, sources)
    if order == "partition by partition":  # the worst a backlog can do: one partition minutes ahead
        counters.sort(key=lambda c: c[0])
    fired = []
    wall = 0.0
    for i in range(0, len(counters), batch):
        chunk = counters[i : i + batch]
        out = stage1.process([v for _, v in chunk], [s for s, _ in chunk])
        for k in out.symptoms:
            events, reason = stage2.feed(k.value, wall, channel=k.key.decode())
            assert reason is None
            fired += events
        wall += 0.001
    fired += stage2.advance(wall + 60)  # every input idle: time moves on, incidents resolve
    return [(a.kind, a.status, a.root.device, a.start_ns) for a in fired], stage2
