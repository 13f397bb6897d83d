"""What the streaming tests share: a worker pair, a reader of a topic, a trace and what the
in-process replay finds in it, and the polls a topic or a store holds."""

from __future__ import annotations

import threading
from pathlib import Path

from kafka import KafkaConsumer

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, Snapshot, Topology, decode, decode_rates
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.storage.store import Store
from fabricwatch.streams.epochs import LogEpochs
from fabricwatch.streams.kafka_io import BrokerSettings
from helpers.paths import SCENARIOS
from helpers.waiting import wait_for

POLL_NS = 1_000_000_000
SESSION_TIMEOUT_S = 6
TANSU_GROUP = {"session_timeout_ms": 6000, "max_poll_interval_ms": 6000, "heartbeat_interval_ms": 1000}

LOSSY_LINKS = """\
name: lossy_links
seed: 34
duration: 90
poll_interval: 1.0
fabric: {leaves: 2, spines: 4, hosts_per_leaf: 8}
collector: {noise: 0.03, jitter_ms: 10}
jobs:
  - name: dp
    hosts: 16
    schedule:
      - {op: AllReduce, begin: 0, end: 90, load: 0.35}
faults:
  - {kind: lossy_link, device: h003, loss_rate: 0.0001, start: 10.3, duration: 30}
  - {kind: lossy_link, device: spine01, port: Ethernet0, loss_rate: 0.00001, one_way: true,
     start: 45.6, duration: 30}
  - {kind: error_burst, device: h012, loss_rate: 0.001, start: 20.2, duration: 0.5}
  - {kind: failing_optic, device: h006, start: 15.3, duration: 40}
  - {kind: degrading_link, device: h010, pre_fec_ber: 0.00005, start: 30.2, duration: 50}
"""
"""Two lossy links (a NIC's, one way on a spine's port), a burst, a failing optic and a degrading link
on 16 hosts for 90 s: what the streaming tests of issue 34 replay."""


class Collector:
    """Reads a topic in a thread from the beginning, as a dashboard or an alerter would (and, as
    they do, reads a restarted broker's new log from its beginning too)."""

    def __init__(self, settings: BrokerSettings, topic: str) -> None:
        self.records: list = []
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            topic, **settings.kafka_kwargs(), auto_offset_reset="earliest", metadata_max_age_ms=2000
        )
        self._epochs = LogEpochs(self._consumer, f"test reader of {topic}")
        self._rounds = 0
        self._at_end = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            polled = self._consumer.poll(timeout_ms=200)
            if not self._epochs.changed():
                self.records.extend(r for records in polled.values() for r in records)
            self._at_end = self._read_to_end()
            self._rounds += 1

    def _read_to_end(self) -> bool:
        """Whether its position is at the broker's end of every partition it reads (asked now)."""
        parts = list(self._consumer.assignment())
        ends = self._consumer.end_offsets(parts) if parts else {}
        positions = {tp: self._consumer.position(tp, timeout_ms=1000) for tp in ends}
        return bool(ends) and all(
            positions[tp] is not None and positions[tp] >= end for tp, end in ends.items()
        )

    def caught_up(self, timeout_s: float = 30.0) -> bool:
        """Whether, in a round begun after this call, the reader had read all the topic held: what
        a test waits for before it asserts that nothing more came (not a fixed sleep)."""
        began = self._rounds
        return wait_for(lambda: self._rounds > began + 1 and self._at_end, timeout_s)

    def rates(self) -> list:
        """The per-device rates read so far (a worker sends a batch's rates as one message)."""
        return [m for r in list(self.records) for m in decode_rates(r.value)]

    def stop(self) -> list:
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()
        return self.records


def trace(tmp_path: Path, duration: int) -> Path:
    path = tmp_path / "demo.trace.gz"
    simulate(load_scenario(SCENARIOS / "demo.yaml", {"duration": duration}), path)
    return path


def topology_and_snapshots(path: Path) -> tuple[Topology, list[Snapshot]]:
    """A trace's (last) topology and its snapshots in file order: stage 1's input."""
    topology, snaps = None, []
    with TraceReader(path) as reader:
        for rec in reader:
            msg = decode(rec.value())
            if isinstance(msg, Topology):
                topology = msg
            elif isinstance(msg, Snapshot):
                snaps.append(msg)
    assert topology is not None
    return topology, snaps


def in_process(path: Path) -> list[Anomaly]:
    return replay_trace(path, Pipeline(DetectorConfig()), lambda events: None).anomalies


def firing(anomalies: list[Anomaly]) -> dict[tuple[str, str], int]:
    """(kind, root device) -> start time, once per fingerprint: duplicates after a takeover fold."""
    return {(a.kind, a.root.device): a.start_ns for a in anomalies if a.status == "firing"}


def anomalies_in(records: list) -> list[Anomaly]:
    """The anomalies among a topic's records (a malformed one, put there by a test, is skipped)."""
    out = []
    for r in records:
        try:
            out.append(decode(r.value, Anomaly))
        except DecodeError:
            continue
    return out


class Reference:
    """What the in-process replay of a trace finds, to hold a streaming run's output against."""

    def __init__(self, path: Path) -> None:
        anomalies = in_process(path)
        self.firing = firing(anomalies)
        self.fingerprints = {a.fingerprint for a in anomalies}
        self.ended = {a.fingerprint for a in anomalies if a.status == "resolved"}

    def all_seen(self, out: Collector) -> bool:
        """Every incident of the reference has fired, and ended where it ended, on ``out``."""
        seen = anomalies_in(out.records)
        ended = {a.fingerprint for a in seen if a.status == "resolved"}
        return self.firing.keys() <= firing(seen).keys() and self.ended <= ended

    def assert_found(self, records: list) -> None:
        """The same incidents (none missed, no false one), each fired within a poll of the reference."""
        got = firing(anomalies_in(records))
        assert got.keys() == self.firing.keys(), (got, self.firing)
        for key, start in self.firing.items():
            assert abs(got[key] - start) <= POLL_NS, key


def demo_on_workers(
    broker: BrokerSettings, workers: list, tmp_path: Path
) -> tuple[Path, Reference, Collector]:
    """110 s of the demo as a trace, what the in-process replay finds in it, the workers ready and
    a reader of fabric.anomalies: where the streaming tests that publish the demo start."""
    path = trace(tmp_path, duration=110)
    expected = Reference(path)
    for w in workers:
        w.wait_ready()
    return path, expected, Collector(broker, topics.ANOMALIES)


def polls_on(settings: BrokerSettings, topic: str) -> set[tuple[str, int]]:
    """(device, time) of every rates message the topic holds."""
    reader = KafkaConsumer(
        topic, **settings.kafka_kwargs(), auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    out = set()
    try:
        for record in reader:
            try:
                rates = decode_rates(record.value)
            except DecodeError:
                continue  # a malformed record put there by a test: the sink skips it too
            out |= {(r.device, r.ts_ns) for r in rates}
    finally:
        reader.close()
    return out


def stored_polls(store: Store) -> set[tuple[str, int]]:
    return {(d, int(t)) for d, t in store.query("SELECT DISTINCT device, ts_ns FROM rates_raw")}
