"""Congestion as a NIC sees it: ECN-marked packets arriving and CNPs going out (receiver), or CNPs
arriving (sender). Corroboration for stage 2, never an alert on its own: firmware CNP counting is
known to be unreliable (Meta's finding), so it only adds evidence and names hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Detector, Poll, SymptomKind
from fabricwatch.schemas.messages import Symptom

_SIGNALS = (
    ("ecn_received", ("rx_ecn_marked_packets", "cnp_sent")),
    ("cnp_received", ("cnp_received",)),
)


class NicCongestion:
    """An element (port x signal) is reported exactly while its signal holds: no persistence is
    asked of corroboration. So its state is only when each running element began, kept as a dict
    per device: a ``StreakTable``'s numpy steps on a NIC's 1 x 2 array were two thirds of this
    detector's cost, paid on every marking NIC's every poll."""

    SIGNALS = frozenset(name for _, names in _SIGNALS for name in names)

    def __init__(self) -> None:
        self._since: dict[str, tuple[tuple[int, ...], dict[int, int]]] = {}
        """Per device: the shape its elements were read in, and each running element's start (ns)
        by flat index. A new shape (ports added or removed) starts afresh, reporting nothing."""
        self._columns: dict[int, _Columns] = {}
        """Per counter table, by identity."""

    def open(self, device: str) -> bool:
        found = self._since.get(device)
        return found is not None and bool(found[1])

    def update(self, poll: Poll) -> list[Symptom]:
        """Every signalled element, and once each element whose signal stopped."""
        frame = poll.frame
        if frame.device_kind != "nic":
            return []
        signalled, columns = self._signalled(frame)
        shape, running = self._since.get(frame.device) or ((), {})
        if shape != signalled.shape:
            running = {}
        now = np.flatnonzero(signalled).tolist()
        if not now and not running:
            self._since[frame.device] = (signalled.shape, running)
            return []
        began = frame.ts_ns - int(frame.dt_s * 1e9)
        since = {i: running.get(i, began) for i in now}
        self._since[frame.device] = (signalled.shape, since)
        width = signalled.shape[1]

        def symptom(flat: int, start_ns: int, active: bool) -> Symptom:
            p, k = divmod(flat, width)
            read = ((key, frame.values.item(p, col)) for key, col in columns.shown[k])
            return Symptom(
                kind=_SIGNALS[k][0],
                device=frame.device,
                port=frame.ports[p],
                ts_ns=frame.ts_ns,
                start_ns=start_ns,
                active=active,
                evidence={key: round(v, 1) for key, v in read if math.isfinite(v)},  # ``evidence(1, ...)``
            )

        ended = sorted(i for i in running if i not in since)
        return [symptom(i, since[i], True) for i in now] + [symptom(i, running[i], False) for i in ended]

    def _signalled(self, frame: RateFrame) -> tuple[np.ndarray, _Columns]:
        """Ports x signals: every counter of the signal that the device has, above zero (none:
        not signalled); and the table's columns. One pass over the columns, found once per
        counter table: this is read for every marking NIC's every poll."""
        found = self._columns.get(id(frame.layout))
        if found is None or found.layout is not frame.layout:
            found = self._columns[id(frame.layout)] = _Columns.of(frame.layout)
        counts = (frame.values[:, found.cols] > 0).astype(np.int64) @ found.member
        return (counts == found.sizes) & (found.sizes > 0), found


@dataclass(frozen=True)
class _Columns:
    """Where a counter table has the signals' counters (holding the table, whose identity keys it)."""

    layout: Layout
    cols: np.ndarray
    member: np.ndarray
    """Per column, which signal it is of (one-hot)."""
    sizes: np.ndarray
    """Per signal, how many of its counters the table has."""
    shown: tuple[tuple[tuple[str, int], ...], ...]
    """Per signal, each counter it has as (evidence key, column): what its symptom shows."""

    @classmethod
    def of(cls, layout: Layout) -> _Columns:
        present = [
            (col, k, name)
            for k, (_, names) in enumerate(_SIGNALS)
            for name in names
            if (col := layout.col(name)) is not None
        ]
        member = np.zeros((len(present), len(_SIGNALS)), dtype=np.int64)
        for row, (_, k, _) in enumerate(present):
            member[row, k] = 1
        shown = tuple(tuple((f"{n}_pps", c) for c, j, n in present if j == k) for k in range(len(_SIGNALS)))
        return cls(
            layout, np.array([c for c, _, _ in present], dtype=np.intp), member, member.sum(axis=0), shown
        )


DETECTOR = Detector(
    name="nic_congestion",
    symptoms=tuple(SymptomKind(kind) for kind, _ in _SIGNALS),  # evidence for incasts only
    device_kinds=frozenset({"nic"}),
    make=lambda config: NicCongestion(),
    signals=NicCongestion.SIGNALS,
)
