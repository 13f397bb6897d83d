"""Stage 1: one device's snapshots in, its rates and symptoms out. Scales with the number of devices:
everything here is keyed by device, so any partitioning of devices across workers is valid.

``process_batch`` is the workers' path: rates for a batch in stacked numpy passes, and the NIC
detectors skipped for a NIC whose poll shows none of their signals (no pause, ECN mark or CNP
above zero) while none of its streaks is open, since for such a poll they change nothing and say
nothing. A fabric has ten NIC snapshots for every switch one, and nearly all are quiet. The
switch detectors of pauses and marks return at once, by the same reasoning, from a poll in which
the switch received and sent no pause and marked nothing while none of their streaks is open."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.ecmp import EcmpDetector
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incast import IncastDetector
from fabricwatch.detectors.nic_congestion import NicCongestion
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.detectors.pfc_storm import NicPauseStorm, PfcWatchdog, StalledEgress
from fabricwatch.detectors.rates import RateEngine, RateFrame
from fabricwatch.schemas.messages import Snapshot, Symptom, Topology

_NIC_SIGNALS = PfcWatchdog.SIGNALS | NicPauseStorm.SIGNALS | NicCongestion.SIGNALS


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
        self._open_nics: set[str] = set()
        """NICs with a streak open in a NIC detector: their every poll goes to the detectors."""

    def set_topology(self, topology: Topology) -> None:
        self.fabric = FabricMap(topology, self.config.default_link_gbps)

    def process(self, snap: Snapshot) -> tuple[RateFrame | None, list[Symptom]]:
        line, known = self.fabric.speeds(snap.device, snap.ports)
        frame = self.rates.update(snap, known)
        if frame is None:
            return None, []
        return frame, self._detect(frame, line)

    def process_batch(self, snaps: Sequence[Snapshot]) -> list[tuple[RateFrame | None, list[Symptom]]]:
        """``process`` of each snapshot in order, with the same results, at a fraction of the cost."""
        speeds = [self.fabric.speeds(s.device, s.ports) for s in snaps]
        frames = self.rates.update_batch(snaps, [known for _, known in speeds])
        calm = _calm_nics(frames) if self._outliers is None else set()
        out: list[tuple[RateFrame | None, list[Symptom]]] = []
        for i, (frame, (line, _)) in enumerate(zip(frames, speeds, strict=True)):
            if frame is None:
                out.append((None, []))
            elif i in calm and frame.device not in self._open_nics:  # open: as the loop left it
                out.append((frame, []))
            else:
                out.append((frame, self._detect(frame, line)))
        return out

    def _detect(self, frame: RateFrame, line: np.ndarray) -> list[Symptom]:
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
            if (
                self._pfc.open(frame.device)
                or self._nic_pause.open(frame.device)
                or self._nic.open(frame.device)
            ):
                self._open_nics.add(frame.device)
            else:
                self._open_nics.discard(frame.device)
        if self._outliers is not None:
            edge = (
                self.fabric.host_facing(frame.device, frame.ports) if frame.device_kind == "switch" else None
            )
            symptoms += self._outliers.update(frame, line, edge)
        return symptoms

    def flush(self) -> list[Symptom]:
        """Symptoms the learned outlier detector held back for batch scoring; call once per tick."""
        return self._outliers.flush() if self._outliers is not None else []


def _calm_nics(frames: Sequence[RateFrame | None]) -> set[int]:
    """Which frames are NIC polls with none of the NIC detectors' signals above zero: checked per
    layout in one numpy pass, not per frame."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, frame in enumerate(frames):
        if frame is not None and frame.device_kind == "nic":
            groups.setdefault((id(frame.layout), frame.values.shape[0]), []).append(i)
    calm: set[int] = set()
    for members in groups.values():
        layout = frames[members[0]].layout  # type: ignore[union-attr]
        values = np.stack([frames[i].values for i in members])  # type: ignore[union-attr]
        signals = values[:, :, layout.columns_of(_NIC_SIGNALS)]
        calm.update(members[k] for k in np.flatnonzero(~(signals > 0).any(axis=(1, 2))))
    return calm
