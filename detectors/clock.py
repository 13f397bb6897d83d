"""The fabric's clock, safe from one device whose clock is wrong.

Stage 2 evaluates as input time passes (``Ticker``), and input time is the collectors' clocks. One
snapshot stamped ten minutes ahead would move time ten minutes on: nothing is evaluated until the
input catches up, and every incident of those ten minutes is lost. A collector's clock that is wrong
is a fact of life, so one device must not move the fabric's time by itself.

A snapshot more than ``bound`` ahead of the newest accepted time is held, one per device. Time jumps
only when most of the fabric agrees: held snapshots within ``bound`` of each other from more than
half of the devices reporting (at least two; a whole fabric back after a collector outage, or a
replayed trace with a gap) release every held snapshot of the jump in time order. A device whose
clock is alone ahead keeps being held; its older held snapshot is dropped, counted and reported with
how far ahead it is. The bound is three of the longest poll interval seen (a device's next poll,
late by up to half a poll of clock skew, stays well inside; a moving average per device, so one gap
widens it for a while only), and ``first_bound_s`` until an interval is known.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

_NS = 1_000_000_000
RECENT_S = 300.0
"""Devices seen this recently (fabric time) count toward the quorum a jump of time needs."""


@dataclass
class ClockGuard(Generic[T]):
    first_bound_s: float = 30.0
    polls: float = 3.0
    min_bound_s: float = 2.0
    now_ns: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    """Snapshots dropped per device because its clock stayed ahead of the fabric's."""
    ahead_s: dict[str, float] = field(default_factory=dict)
    """Per device, how far ahead its last held snapshot was (seconds)."""
    _last: dict[str, int] = field(default_factory=dict)
    _typical: dict[str, float] = field(default_factory=dict)
    _interval_ns: int = 0
    _held: dict[str, tuple[int, T]] = field(default_factory=dict)
    _recent: tuple[int, int] | None = None
    """(the first held time it was counted for, devices reporting then): see ``_needed``."""

    def bound_ns(self) -> int:
        if not self._interval_ns:
            return int(self.first_bound_s * _NS)
        return max(int(self.min_bound_s * _NS), int(self.polls * self._interval_ns))

    def ahead(self, ts_ns: int) -> bool:
        """Whether a record stamped ``ts_ns`` is further ahead of the fabric's time than a poll
        can be."""
        return self.now_ns > 0 and ts_ns > self.now_ns + self.bound_ns()

    def seen(self, device: str, ts_ns: int) -> None:
        """A snapshot accepted at ``ts_ns``: the fabric's time and the device's poll interval move."""
        last = self._last.get(device)
        if last is not None and ts_ns > last:
            # A moving average: one gap (a missed poll, an outage) widens the bound for a while only.
            dt = ts_ns - last
            typical = self._typical[device] = (7 * self._typical.get(device, dt) + dt) / 8
            self._interval_ns = max(int(typical), int(self._interval_ns * 0.99))
        self._last[device] = max(ts_ns, last or 0)
        self.now_ns = max(self.now_ns, ts_ns)

    def hold(self, device: str, ts_ns: int, item: T) -> tuple[list[tuple[int, T]], T | None]:
        """Hold a snapshot that is ahead; return the snapshots released by it (in time order) and
        the one it displaced (dropped), if any."""
        displaced = self._held.get(device)
        if displaced is not None:
            self.dropped[device] += 1
        self._held[device] = (ts_ns, item)
        self.ahead_s[device] = (ts_ns - self.now_ns) / _NS
        first = min(ts for ts, _ in self._held.values())
        agree = sorted(
            ((ts, d) for d, (ts, _) in self._held.items() if ts <= first + self.bound_ns()),
        )
        if len(agree) < self._needed(first):
            return [], None if displaced is None else displaced[1]
        released = []
        for ts, d in agree:
            released.append((ts, self._held.pop(d)[1]))
            self.ahead_s.pop(d, None)
        return released, None if displaced is None else displaced[1]

    def _needed(self, first_ns: int) -> int:
        """Devices that must agree to move time: most of those that report (more than half of the
        devices seen within ``RECENT_S`` of the fabric's time), and at least two where two are
        known. Two hosts with the same timezone error agree with each other, and moved the whole
        fabric an hour on; a fabric back from an outage, or a replayed trace with a gap, comes back
        whole. Counted once per jump: every snapshot of a fabric that jumps together is held."""
        if self._recent is None or first_ns != self._recent[0]:
            since = self.now_ns - int(RECENT_S * _NS)
            reporting = sum(1 for ts in self._last.values() if ts >= since)
            self._recent = (first_ns, reporting)
        known = len(self._last | self._held)
        return max(min(2, known), self._recent[1] // 2 + 1)

    def drain(self) -> list[tuple[str, T]]:
        """What is still held (at the end of the input): never confirmed, so dropped."""
        out = [(d, item) for d, (_, item) in sorted(self._held.items())]
        for d in self._held:
            self.dropped[d] += 1
        self._held.clear()
        return out

    def reason(self, device: str) -> str:
        """Why a snapshot of ``device`` was dropped, for its dead letter or log line."""
        ahead = self.ahead_s.get(device)
        by = f" by {ahead:.1f} s" if ahead is not None else ""
        return (
            f"clock of {device} ahead of the fabric's{by}, and no other device confirms it: snapshot dropped"
        )
