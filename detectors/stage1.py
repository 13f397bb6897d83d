"""Stage 1: one device's snapshots in, its rates and symptoms out. Scales with the number of devices:
everything here is keyed by device, so any partitioning of devices across workers is valid."""

from __future__ import annotations

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.ecmp import EcmpDetector
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incast import IncastDetector
from fabricwatch.detectors.nic_congestion import NicCongestion
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.detectors.pfc_storm import NicPauseStorm, PfcWatchdog, StalledEgress
from fabricwatch.detectors.rates import RateEngine, RateFrame
from fabricwatch.schemas.messages import Snapshot, Symptom, Topology


class Stage1:
    def __init__(self, config: DetectorConfig | None = None, outliers: OutlierStage | None = None) -> None:
        self.config = config or DetectorConfig()
        self.rates = RateEngine()
        self.fabric = FabricMap(None, self.config.default_link_gbps)
        self._pfc = PfcWatchdog(self.config.pfc_storm)
        self._nic_pause = NicPauseStorm(self.config.pfc_storm)
        self._stalled = StalledEgress(self.config.pfc_storm)
        self._incast = IncastDetector(self.config.incast)
        self._ecmp = EcmpDetector(self.config.ecmp)
        self._nic = NicCongestion()
        self._outliers = outliers

    def set_topology(self, topology: Topology) -> None:
        self.fabric = FabricMap(topology, self.config.default_link_gbps)

    def process(self, snap: Snapshot) -> tuple[RateFrame | None, list[Symptom]]:
        line, known = self.fabric.speeds(snap.device, snap.ports)
        frame = self.rates.update(snap, known)
        if frame is None:
            return None, []
        symptoms = self._pfc.update(frame, line)
        if frame.device_kind == "switch":
            symptoms += self._stalled.update(frame, line)
            symptoms += self._incast.update(
                frame,
                line,
                self.fabric.host_facing(frame.device, frame.ports),
                lambda queues: self.fabric.ecn_curve(frame.device, frame.ports, queues),
            )
            symptoms += self._ecmp.update(frame, self.fabric.ecmp_groups(frame.device), line)
        else:
            symptoms += self._nic_pause.update(frame)
            symptoms += self._nic.update(frame)
        if self._outliers is not None:
            edge = (
                self.fabric.host_facing(frame.device, frame.ports) if frame.device_kind == "switch" else None
            )
            symptoms += self._outliers.update(frame, line, edge)
        return frame, symptoms

    def flush(self) -> list[Symptom]:
        """Symptoms the learned outlier detector held back for batch scoring; call once per tick."""
        return self._outliers.flush() if self._outliers is not None else []
