"""Congestion as a NIC sees it: ECN-marked packets arriving and CNPs going out (receiver), or CNPs
arriving (sender). Corroboration for stage 2, never an alert on its own: firmware CNP counting is
known to be unreliable (Meta's finding), so it only adds evidence and names hosts.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.evidence import evidence
from fabricwatch.detectors.persistence import StreakTable
from fabricwatch.detectors.rates import Layout, RateFrame
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
        self._columns: dict[int, tuple[Layout, np.ndarray, np.ndarray, np.ndarray]] = {}
        """Per counter table (by identity, holding it): the signals' columns it has, which signal
        each is of, and how many each signal has."""

    def open(self, device: str) -> bool:
        return self._streaks.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        if frame.device_kind != "nic":
            return []
        signalled = self._signalled(frame)
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

    def _signalled(self, frame: RateFrame) -> np.ndarray:
        """Ports x signals: every counter of the signal that the device has, above zero (none:
        not signalled). One pass over the columns, found once per counter table: this is read
        for every marking NIC's every poll."""
        found = self._columns.get(id(frame.layout))
        if found is None or found[0] is not frame.layout:
            cols = [(frame.layout.col(n), k) for k, (_, names) in enumerate(_SIGNALS) for n in names]
            present = [(c, k) for c, k in cols if c is not None]
            member = np.zeros((len(present), len(_SIGNALS)), dtype=np.int64)
            for row, (_, k) in enumerate(present):
                member[row, k] = 1
            sizes = member.sum(axis=0)
            found = (frame.layout, np.array([c for c, _ in present], dtype=np.intp), member, sizes)
            self._columns[id(frame.layout)] = found
        _, cols, member, sizes = found
        counts = (frame.values[:, cols] > 0).astype(np.int64) @ member
        return (counts == sizes) & (sizes > 0)


DETECTOR = Detector(
    name="nic_congestion",
    symptoms=tuple(SymptomKind(kind) for kind, _ in _SIGNALS),  # evidence for incasts only
    device_kinds=frozenset({"nic"}),
    make=lambda config: NicCongestion(),
    signals=NicCongestion.SIGNALS,
)
