"""Congestion as a NIC sees it: ECN-marked packets arriving and CNPs going out (receiver), or CNPs
arriving (sender). Corroboration for stage 2, never an alert on its own: firmware CNP counting is
known to be unreliable (Meta's finding), so it only adds evidence and names hosts.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.evidence import evidence
from fabricwatch.detectors.persistence import StreakTable
from fabricwatch.detectors.spec import Detector, Poll, SymptomKind
from fabricwatch.schemas.messages import Symptom

_SIGNALS = (
    ("ecn_received", ("rx_ecn_marked_packets", "cnp_sent")),
    ("cnp_received", ("cnp_received",)),
)


class NicCongestion:
    SIGNALS = frozenset(name for _, names in _SIGNALS for name in names)

    def __init__(self) -> None:
        self._streaks = StreakTable()

    def open(self, device: str) -> bool:
        return self._streaks.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        if frame.device_kind != "nic":
            return []
        columns = []
        for _, names in _SIGNALS:
            rates = [frame.port(n) for n in names]
            rising = [r > 0 for r in rates if r is not None]
            columns.append(np.logical_and.reduce(rising) if rising else np.zeros(len(frame.ports), bool))
        signalled = np.stack(columns, axis=1)
        streak = self._streaks.get(frame.device, signalled.shape)
        streak.step(signalled, frame.ts_ns, frame.dt_s)
        streak.start(signalled)
        cleared = streak.stop(~signalled)

        def symptom(flat: int, active: bool) -> Symptom:
            p, k = np.unravel_index(flat, signalled.shape)
            kind, names = _SIGNALS[k]
            found = {f"{n}_pps": frame.port(n)[p] for n in names if frame.port(n) is not None}
            return Symptom(
                kind=kind,
                device=frame.device,
                port=frame.ports[p],
                ts_ns=frame.ts_ns,
                start_ns=int(streak.since_ns.flat[flat]),
                active=active,
                evidence=evidence(1, **found),
            )

        return streak.report(cleared, symptom)


DETECTOR = Detector(
    name="nic_congestion",
    symptoms=tuple(SymptomKind(kind) for kind, _ in _SIGNALS),  # evidence for incasts only
    device_kinds=frozenset({"nic"}),
    make=lambda config: NicCongestion(),
    signals=NicCongestion.SIGNALS,
)
