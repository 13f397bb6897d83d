"""The whole detection path in one process: messages in (topic, key, time, bytes), anomalies out.

This is what ``fabricwatch replay`` runs without a broker: ``Stage1`` and ``Stage2`` wired back to
back, stage 1 taking the snapshots between two of stage 2's ticks as one batch, as a worker takes
what it reads at once. The streaming workers (``streams/stages.py``) run the same two classes in
separate agents, with Kafka between them. Nothing here blocks or does I/O: a caller feeds records and collects
anomalies, so tests and benchmarks drive it exactly like replay does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fabricwatch.detectors.clock import ClockGuard
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.job_stage import JobStage
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.detectors.registry import REGISTRY, Registry
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.detectors.stage2 import Stage2
from fabricwatch.detectors.topology import TopologyView
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    Anomaly,
    Collectives,
    CommGraph,
    DecodeError,
    Label,
    Periods,
    Phase,
    PhaseMessage,
    Snapshot,
    Steps,
    Topology,
    decode,
)

_EXPECTED = {
    topics.COUNTERS: Snapshot,
    topics.PHASES: PhaseMessage,
    topics.TOPOLOGY: Topology,
    topics.LABELS: Label,
}


@dataclass
class DeadLetter:
    where: str
    topic: str
    reason: str


@dataclass
class PipelineStats:
    records: int = 0
    snapshots: int = 0
    values: int = 0
    symptoms: int = 0
    anomalies: int = 0
    dead_letters: int = 0
    ignored_topics: int = 0


@dataclass
class Pipeline:
    config: DetectorConfig = field(default_factory=DetectorConfig)
    tick_s: float = 0.02
    stats: PipelineStats = field(default_factory=PipelineStats)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    max_dead_letters_kept: int = 1000
    outliers: OutlierStage | None = None
    on_frame: Callable[[RateFrame], None] | None = None
    """Called with every rate frame (e.g. to store rates); None costs nothing."""
    on_context: Callable[[PhaseMessage | Topology], None] | None = None
    """Called with every decoded phase, communication graph and topology (e.g. to store them)."""
    on_periods: Callable[[Periods], None] | None = None
    """Called with the traffic periods stage 1 judged, at each tick (e.g. to store them)."""
    registry: Registry = REGISTRY
    """The detectors both stages run (the shipped ones; a test adds its own)."""
    batch_max: int = 1000
    """Snapshots taken between two ticks go through stage 1 as one batch, as the workers' do
    (``Stage1.process_batch``: the same rates and symptoms at a fraction of the cost), up to this
    many; a tick, any other message and ``finish`` run what is pending first."""

    def __post_init__(self) -> None:
        self.stage1 = Stage1(self.config, self.outliers, self.registry)
        self.stage2 = Stage2(self.config, self.tick_s, self.registry)
        self.jobs = JobStage(self.config, self.registry)
        self.topology = TopologyView()
        self.clock: ClockGuard[tuple[str, Snapshot]] = ClockGuard()
        self._pending: list[Snapshot] = []

    def feed(self, topic: str, ts_ns: int, value: bytes, where: str = "") -> list[Anomaly]:
        """One record in; the anomalies (lifecycle events) it caused out."""
        self.stats.records += 1
        expected = _EXPECTED.get(topic)
        if expected is None:
            self.stats.ignored_topics += 1
            return []
        if self.clock.ahead(ts_ns):
            return self._ahead(topic, ts_ns, value, where)
        anomalies = self._maybe_tick(ts_ns)
        try:
            msg = decode(value, expected)
        except DecodeError as exc:
            self._dead_letter(where, topic, str(exc))
            return anomalies
        self._take(ts_ns, msg)
        return anomalies

    def finish(self) -> list[Anomaly]:
        """Evaluate what is pending at the end of the input (the last poll's symptoms)."""
        for device, (where, _) in self.clock.drain():
            self._dead_letter(where, topics.COUNTERS, self.clock.reason(device))
        return self._tick(self.stage2.ticker.now_ns)

    def _take(self, ts_ns: int, msg: Snapshot | PhaseMessage | Topology | Label) -> None:
        if isinstance(msg, Snapshot):
            self.clock.seen(msg.device, ts_ns)
        self._dispatch(msg)
        self.stage2.seen(ts_ns)

    def _ahead(self, topic: str, ts_ns: int, value: bytes, where: str) -> list[Anomaly]:
        """A record stamped too far ahead of the fabric's time (``ClockGuard``): context is taken
        without moving time; a snapshot is held until other devices confirm the time."""
        try:
            msg = decode(value, _EXPECTED[topic])
        except DecodeError as exc:
            self._dead_letter(where, topic, str(exc))
            return []
        if not isinstance(msg, Snapshot):
            self._dispatch(msg)
            return []
        released, dropped = self.clock.hold(msg.device, ts_ns, (where, msg))
        if dropped is not None:
            self._dead_letter(dropped[0], topic, self.clock.reason(msg.device))
        anomalies: list[Anomaly] = []
        for ts, (_, snap) in released:
            anomalies += self._maybe_tick(ts)
            self._take(ts, snap)
        return anomalies

    def _dispatch(self, msg: Snapshot | PhaseMessage | Topology | Label) -> None:
        if isinstance(msg, Snapshot):
            self.stats.snapshots += 1
            self.stats.values += len(msg.ports) * len(msg.counters)
            self._pending.append(msg)
            if len(self._pending) >= self.batch_max:
                self._run_pending()
            return
        self._run_pending()  # stage 2 takes the symptoms before the context that follows them
        if isinstance(msg, (Phase, CommGraph, Collectives, Steps)):
            self.stage2.on_phase(msg)
            if isinstance(msg, Collectives):
                self.jobs.on_collectives(msg)
            elif isinstance(msg, Steps):
                self.jobs.on_steps(msg)
            elif isinstance(msg, Phase):
                self.jobs.on_phase(msg)
            if self.on_context is not None:
                self.on_context(msg)
        elif isinstance(msg, Topology):
            merged = self.topology.add(msg)
            self.stage1.set_topology(merged)
            self.stage2.set_topology(merged)
            if self.on_context is not None:
                self.on_context(msg)
        else:
            self.labels.append(msg)

    def _run_pending(self) -> None:
        """Stage 1 on the snapshots taken since it last ran, in order; their symptoms to stage 2."""
        if not self._pending:
            return
        snaps, self._pending = self._pending, []
        for frame, symptoms in self.stage1.process_batch(snaps):
            if frame is not None and self.on_frame is not None:
                self.on_frame(frame)
            self.stats.symptoms += len(symptoms)
            for s in symptoms:
                self.stage2.on_symptom(s)

    def _maybe_tick(self, ts_ns: int) -> list[Anomaly]:
        due = self.stage2.due(ts_ns)
        return [] if due is None else self._tick(due)

    def _tick(self, now_ns: int) -> list[Anomaly]:
        self._run_pending()
        for periods in self.stage1.take_periods():
            if self.on_periods is not None:
                self.on_periods(periods)
        held = self.stage1.flush(now_ns)
        self.stats.symptoms += len(held)
        for s in held:
            self.stage2.on_symptom(s)
        anomalies = self.stage2.evaluate(now_ns)
        self.jobs.on_fabric(anomalies)
        anomalies += self.jobs.evaluate(now_ns)
        self.stats.anomalies += len(anomalies)
        return anomalies

    def _dead_letter(self, where: str, topic: str, reason: str) -> None:
        self.stats.dead_letters += 1
        if len(self.dead_letters) < self.max_dead_letters_kept:
            self.dead_letters.append(DeadLetter(where, topic, reason))
