"""Store what an in-process pipeline sees (``fabricwatch replay``/``demo``): rates, traffic periods,
phases, topology and anomalies go through the same batched ``Sink`` the Kafka consumer uses."""

from __future__ import annotations

from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.detectors.summary import summarise
from fabricwatch.schemas.messages import Anomaly, PhaseMessage, Topology
from fabricwatch.storage.sink import Sink


class PipelineRecorder:
    """Hooks a pipeline's frames and context into a sink; feed it the anomalies the pipeline returns.

    Utilisation uses the pipeline's own view of line rates (the topology it was given, else the
    configured default), so stored figures agree with what the detectors judged."""

    def __init__(self, pipeline: Pipeline, sink: Sink) -> None:
        self.pipeline = pipeline
        self.sink = sink
        pipeline.on_frame = self.on_frame
        pipeline.on_context = self.on_context
        pipeline.on_periods = sink.add_periods

    def on_frame(self, frame: RateFrame) -> None:
        line = self.pipeline.stage1.fabric.port_speeds_bps(frame.device, frame.ports)
        self.sink.add_rates(summarise(frame, line))
        self.sink.maybe_flush()

    def on_context(self, msg: PhaseMessage | Topology) -> None:
        self.sink.add(msg)

    def on_anomalies(self, events: list[Anomaly]) -> None:
        for a in events:
            self.sink.add_anomaly(a)

    def finish(self) -> None:
        """Store what is still buffered."""
        self.sink.flush()
