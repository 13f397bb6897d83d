"""Incast, per switch: an egress queue congested past the ECN threshold by several senders at once.

Evidence on one switch, all from one snapshot's rates: the queue's watermark (peak since the last
read) is deep in the ECN marking band (see detectors/config.py for why depth means fan-in), the
queue keeps ECN-marking, it is still above Kmin when read (it did not drain: the congestion stands;
without an occupancy counter, the port running near line rate stands in), and, when it is reported,
at least ``min_fan_in`` other ports bring in a real share of traffic (not asked of the poll in which
it began: a few milliseconds of incast at the end of an interval barely move the ingress averages).
A burst the buffer absorbs shows the watermark for one poll; an incast persists, so it must hold
for ``sustain_polls`` polls unless it already hurts (drops on that queue, or the switch pausing its
own ingress ports) or one poll already shows it lasting the whole interval (line rate throughout,
the queue deep at its peak and still deep when read).

Only host-facing ports can be incast victims: many-to-one traffic converges on the last hop to the
receiver, which carries all of it. Congestion on a fabric link is either ECMP imbalance (the ECMP
detector's business) or oversubscription under balanced load, and neither is an incast.
"""

from __future__ import annotations

import math

import numpy as np

from fabricwatch.detectors.config import IncastConfig
from fabricwatch.detectors.evidence import cell_symptom, evidence
from fabricwatch.detectors.persistence import StreakTable
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.schemas.messages import Symptom


class IncastDetector:
    def __init__(self, config: IncastConfig) -> None:
        self.config = config
        self._streaks = StreakTable()

    def update(self, frame: RateFrame, line_Bps: np.ndarray, host_facing: np.ndarray) -> list[Symptom]:
        watermark, queues = frame.indexed("queue_watermark_bytes")
        if queues.size == 0:
            return []
        cfg = self.config
        ecn = frame.aligned("queue_ecn_marked_packets", queues)
        drops = frame.aligned("queue_drops", queues)
        occupancy = frame.aligned("queue_occupancy_bytes", queues)
        tx = frame.port("tx_bytes")
        rx = frame.port("rx_bytes")

        band = cfg.ecn_kmax_bytes - cfg.ecn_kmin_bytes
        streak = self._streaks.get(frame.device, watermark.shape)
        deep = watermark >= cfg.ecn_kmin_bytes + cfg.band_fraction * band
        held = (watermark >= cfg.ecn_kmin_bytes + cfg.hold_band_fraction * band) & (
            (streak.polls > 0) | streak.active
        )
        marking = deep | held if ecn is None else (deep | held) & (ecn > 0)
        if occupancy is not None:
            standing = occupancy >= cfg.ecn_kmin_bytes
        else:
            standing = (tx >= cfg.min_egress_utilisation * line_Bps)[:, None]
        feeders = rx >= cfg.fan_in_port_fraction * line_Bps
        fan_in = feeders.sum() - feeders
        congested = marking & standing & host_facing[:, None]
        fed = (fan_in >= cfg.min_fan_in)[:, None]

        streak.step(congested, frame.ts_ns, frame.dt_s)
        pausing = self._pausing_ingress(frame)
        hurting = pausing if drops is None else (drops > 0) | pausing
        whole_poll = self._congested_throughout(frame, occupancy, watermark, ecn, queues, tx, line_Bps, band)
        streak.start(fed & ((streak.polls >= cfg.sustain_polls) | (congested & (hurting | whole_poll))))
        cleared = streak.stop(~congested)

        def proof(p: int, q: int) -> dict[str, float | int | str]:
            return evidence(
                queue_watermark_bytes=watermark[p, q],
                ecn_marked_pps=ecn[p, q] if ecn is not None else math.nan,
                egress_utilisation=tx[p] / line_Bps[p],
                fan_in_ports=int(fan_in[p]),
                drops_pps=drops[p, q] if drops is not None else math.nan,
                pausing_ingress=int(pausing),
            )

        return streak.report(
            cleared,
            lambda i, active: cell_symptom(
                "incast", frame, congested.shape, i, queues, streak.since_ns, active, proof
            ),
        )

    def _congested_throughout(
        self,
        frame: RateFrame,
        occupancy: np.ndarray | None,
        watermark: np.ndarray,
        ecn: np.ndarray | None,
        queues: np.ndarray,
        tx: np.ndarray,
        line_Bps: np.ndarray,
        band: float,
    ) -> np.ndarray:
        """A port at line rate for the whole poll whose queue is deep both at its peak and when read
        was congested all along: that is already sustained, one poll is enough. A switch without a
        depth gauge proves "when read" by its marks: a queue that only peaked once marks few packets,
        one that stood deep all poll marks them at WRED's probability for that depth."""
        cfg = self.config
        deep = cfg.ecn_kmin_bytes + cfg.band_fraction * band
        saturated = (tx >= cfg.full_poll_utilisation * line_Bps)[:, None]
        if occupancy is not None:
            return saturated & (occupancy >= deep) & (watermark >= deep)
        sent = frame.aligned("queue_tx_packets", queues)
        if ecn is None or sent is None:
            return np.zeros(watermark.shape, dtype=bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            marked = ecn / sent
        standing = marked >= cfg.band_fraction * cfg.ecn_pmax * cfg.standing_marks
        return saturated & (watermark >= deep) & standing

    @staticmethod
    def _pausing_ingress(frame: RateFrame) -> np.ndarray:
        """True when this switch is sending PFC pauses on any port: congestion spreading upstream."""
        tx_pfc, _ = frame.indexed("tx_pfc_frames")
        return np.bool_(tx_pfc.size and (tx_pfc > 0).any())
