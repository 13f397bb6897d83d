"""Issue 36: the capacity and microburst windows survive a worker's restart. A worker saves its
devices' windows to ``fabric.state`` on a real broker (Tansu); the worker given their partitions
next takes them back and judges from the next poll as the one that never stopped would: the keeper
alone, and wired into worker processes restarted mid-stream."""

from __future__ import annotations

import asyncio
import threading
import zlib

import faust
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from helpers.streaming import SESSION_TIMEOUT_S, Collector, anomalies_in
from helpers.waiting import wait_for

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.workers import WorkerProcess
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import SymptomBatch, Topology, decode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.faust_app import _aiokafka_kwargs
from fabricwatch.streams.health import Progress
from fabricwatch.streams.kafka_io import ensure_topics
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker
from fabricwatch.streams.traces import publish_trace
from fabricwatch.streams.window_keeper import WindowKeeper
from fabricwatch.streams.worker_context import Worker, WorkerOptions

SCENARIO = """\
name: windows
seed: 36
duration: 420
poll_interval: 1.0
fabric: {leaves: 2, spines: 4, hosts_per_leaf: 8}
collector: {noise: 0.03, jitter_ms: 10}
jobs:
  - name: heavy
    hosts: [h000, h001, h002, h003]
    schedule:
      - {op: AllReduce, begin: 0, end: 420, load: 0.9}
faults:
  - {kind: absorbed_burst, job: moe, receiver: h006, senders: 5, load: 0.3, start: 30.2, duration: 380,
     burst: {duration: 0.02, period: 0.2}}
"""
RESTART_S = 240
"""When the first worker stops: its capacity and microburst findings are open by then."""
KINDS = ("link_hot", "microburst")


def test_a_worker_that_takes_the_devices_over_judges_as_the_one_that_never_stopped(broker, tmp_path):
    path = tmp_path / "windows.yaml"
    path.write_text(SCENARIO)
    simulate(load_scenario(path), tmp_path / "trace")
    topology, polls = _read(tmp_path / "trace")
    start = polls[0][0]
    before = [p for p in polls if p[0] - start < RESTART_S * 10**9]
    after = polls[len(before) :]
    ensure_topics(broker, [topics.STATE])

    first, never_stopped, taking_over = (_worker(broker, topology) for _ in range(3))
    _feed(first, before)
    _feed(never_stopped, before)
    asyncio.run(_hand_over(broker, first, taking_over))

    # A device's first poll on a new worker gives no rates (they need the poll before, which in a
    # worker is re-read from the last commit): compared from each device's second poll on.
    second = after[0][0] + int(1.5e9)
    expected, got = ([s for s in _feed(w, after) if s.ts_ns > second] for w in (never_stopped, taking_over))
    assert {(s.kind, s.device, s.port) for s in expected} >= {
        ("link_hot", "leaf00", "Ethernet0"),
        ("microburst", "leaf00", "Ethernet48"),
    }
    # The same findings, started and ended at the same polls; their counts short of the one poll
    # that gave no rates on the new worker.
    assert [_said(s) for s in got] == [_said(s) for s in expected]
    for g, e in zip(got, expected, strict=True):
        assert 0 <= e.evidence.get("polls", 0) - g.evidence.get("polls", 0) <= 1
        assert g.evidence.get("mean_util") == pytest.approx(e.evidence.get("mean_util"), abs=0.01)
    alone = _worker(broker, topology)  # what the taking-over worker would say without the windows
    assert [s for s in _feed(alone, after) if s.ts_ns > second][:10] != expected[:10]


@pytest.mark.processes
def test_a_worker_restarted_mid_stream_keeps_its_findings_open(broker, tmp_path):
    """A worker stopped (SIGTERM) while its capacity and microburst findings are open, and another
    started in its place while the fabric streams in: the findings stay one incident each, open to
    the trace's end. Without the windows, the new worker cannot judge for half a window, and the hot
    links' findings resolved in it while the links were still hot."""
    path = tmp_path / "windows.yaml"
    path.write_text(SCENARIO)
    simulate(load_scenario(path), tmp_path / "trace")
    _, polls = _read(tmp_path / "trace")
    end_ns = polls[-1][0]
    ensure_topics(broker)
    out, rates = Collector(broker, topics.ANOMALIES), Collector(broker, topics.RATES)
    first = WorkerProcess(broker.bootstrap, tmp_path / "first.log", SESSION_TIMEOUT_S)
    second = None
    feeder = threading.Thread(target=publish_trace, args=(tmp_path / "trace", broker, 8.0))  # 53 s
    try:
        first.wait_ready()
        feeder.start()
        assert wait_for(lambda: {"capacity", "microbursts"} <= _kinds(out), 120), _kinds(out)
        assert first.stop() == 0, first.log_path.read_text()[-2000:]
        assert feeder.is_alive(), "the trace was all sent before the restart: not mid-stream"
        second = WorkerProcess(broker.bootstrap, tmp_path / "second.log", SESSION_TIMEOUT_S)
        second.wait_ready()
        feeder.join()
        assert wait_for(lambda: max((r.ts_ns for r in rates.rates()), default=0) >= end_ns, 60)
        assert out.caught_up()
    finally:
        rates.stop()
        feeder.join()
        if second is not None:
            second.stop()
        first.stop()
    events = [a for a in anomalies_in(out.stop()) if a.kind in ("capacity", "microbursts")]
    by_root: dict[tuple[str, str, str | None], set[str]] = {}
    for a in events:
        by_root.setdefault((a.kind, a.root.device, a.root.port), set()).add(a.fingerprint)
    assert by_root[("capacity", "leaf00", "Ethernet0")] and by_root[("microbursts", "leaf00", "Ethernet48")]
    assert all(len(fps) == 1 for fps in by_root.values()), by_root  # none fired twice
    assert not [a for a in events if a.status == "resolved" and a.ts_ns < end_ns], "resolved mid-stream"
    assert "took the windows of" in second.log_path.read_text()


def _kinds(out: Collector) -> set[str]:
    return {a.kind for a in anomalies_in(list(out.records)) if a.status == "firing"}


async def _hand_over(broker, first: Worker, taking_over: Worker) -> None:
    kw = _aiokafka_kwargs(broker)
    producer = AIOKafkaProducer(**kw)
    await producer.start()

    async def send(topic: str, key: bytes, value: bytes, partition: int) -> None:
        await producer.send_and_wait(topic, value, key=key, partition=partition)

    owned = [TopicPartition(topics.COUNTERS, p) for p in range(broker.partitions_of(topics.COUNTERS))]
    try:
        await WindowKeeper(first, kw, send).save(owned)
    finally:
        await producer.stop()
    await WindowKeeper(taking_over, kw).load(owned)


def _said(s):
    return (s.ts_ns, s.kind, s.device, s.port, s.priority, s.start_ns, s.active)


def _worker(broker, topology: Topology) -> Worker:
    opts = WorkerOptions(broker)
    w = Worker(
        opts,
        faust.App(opts.app_id, broker=f"kafka://{broker.bootstrap}"),
        Progress(),
        Stage1Worker(DetectorConfig()),
        Stage2Worker(DetectorConfig()),
    )
    w.stage1.set_topology(topology)
    return w


def _read(trace) -> tuple[Topology, list[tuple[int, bytes, str]]]:
    """The trace's topology and its counters records: time, value, and an input partition by device."""
    polls, topology = [], None
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic == topics.TOPOLOGY:
                topology = decode(rec.value(), Topology)
            elif rec.topic == topics.COUNTERS:
                polls.append(
                    (rec.ts_ns, rec.value(), f"{topics.COUNTERS}/{zlib.crc32(str(rec.key).encode()) % 12}")
                )
    assert topology is not None
    return topology, polls


def _feed(w: Worker, polls) -> list:
    """The windowed detectors' symptoms of these polls, in order."""
    out = w.stage1.process([p[1] for p in polls], [p[2] for p in polls])
    said = [
        s
        for k in out.symptoms
        for s in decode(k.value, SymptomBatch).items
        if getattr(s, "kind", "") in KINDS
    ]
    return sorted(said, key=lambda s: (s.ts_ns, s.kind, s.device, s.port, s.priority or 0))
