"""Stage 2: the sparse symptoms of a pod, its jobs' phases and the topology in; incidents out.

Scales with pods. Time is event time: ``Ticker`` decides when the correlator evaluates, so the
in-process pipeline and the streaming stage-2 worker (which orders symptoms by watermarks first)
evaluate at the same instants and give the same incidents.
"""

from __future__ import annotations

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incidents import Correlator
from fabricwatch.detectors.registry import REGISTRY, Registry
from fabricwatch.detectors.ticks import Ticker
from fabricwatch.schemas.messages import Anomaly, PhaseMessage, Symptom, Topology


class Stage2:
    def __init__(
        self, config: DetectorConfig | None = None, tick_s: float = 0.02, registry: Registry = REGISTRY
    ) -> None:
        self.config = config or DetectorConfig()
        self.correlator = Correlator(self.config.incidents, registry=registry)
        self.ticker = Ticker(tick_s)

    def set_topology(self, topology: Topology) -> None:
        self.correlator.set_fabric(FabricMap(topology, self.config.default_link_gbps))

    def on_phase(self, phase: PhaseMessage) -> None:
        """A phase or a communication graph of a job."""
        self.correlator.on_phase(phase)

    def on_symptom(self, symptom: Symptom) -> None:
        self.correlator.on_symptom(symptom)

    def due(self, ts_ns: int) -> int | None:
        """The time to evaluate at before taking input stamped ``ts_ns``, or None (see Ticker)."""
        return self.ticker.due(ts_ns)

    def seen(self, ts_ns: int) -> None:
        self.ticker.seen(ts_ns)

    def evaluate(self, at_ns: int, settled_ns: int | None = None) -> list[Anomaly]:
        """The anomaly lifecycle events of an evaluation at ``at_ns``; ``settled_ns`` as in
        ``Correlator.tick``."""
        return self.correlator.tick(at_ns, settled_ns)

    def evaluate_now(self, settled_ns: int | None = None) -> list[Anomaly]:
        """Evaluate at the latest time seen: the caller knows the input is complete for now, or
        that more of it settled."""
        return self.correlator.tick(self.ticker.force(), settled_ns)
