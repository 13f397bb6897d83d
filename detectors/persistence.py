"""How long a condition has held, per element of an array, per device: the memory of stage 1.

Every detector asks the same question of a ports x priorities (or ports, or groups) boolean
array: for how many polls and seconds has this been true without a break, and is it already
reported? Keeping that in arrays keeps the per-snapshot work vectorised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import numpy as np

T = TypeVar("T")

_NONE = np.zeros(0, dtype=np.intp)

LACK_OF_DATA_S = 60.0
"""The default of every detector's ``lack_of_data_s``: how long a reported incident is held
through polls that cannot read it (a gap, counters unknown or not refreshed, a group carrying
nothing) before it ends for lack of data. Such polls never clear it by themselves."""


@dataclass
class Streak:
    polls: np.ndarray
    seconds: np.ndarray
    since_ns: np.ndarray
    active: np.ndarray
    known_ns: np.ndarray
    """Per element, the last poll whose readings of it were known (while it is active)."""
    running: bool = False
    """Whether any element holds a streak; when none does and nothing holds now, a step is free.
    Most ports are healthy most of the time, so this is the common case on the hot path."""
    said: dict[int, Any] = field(default_factory=dict)
    """Per active element, its report from the last poll that knew it (``report``)."""

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> Streak:
        return cls(
            polls=np.zeros(shape, dtype=np.int64),
            seconds=np.zeros(shape, dtype=np.float64),
            since_ns=np.zeros(shape, dtype=np.int64),
            active=np.zeros(shape, dtype=bool),
            known_ns=np.zeros(shape, dtype=np.int64),
        )

    def step(
        self,
        cond: np.ndarray,
        ts_ns: int,
        dt_s: float,
        held_s: np.ndarray | float | None = None,
        known: np.ndarray | None = None,
        bridged: np.ndarray | None = None,
    ) -> None:
        """Extend the streak where ``cond`` holds, break it elsewhere; a new streak starts at the
        beginning of the interval in which the condition was first seen. ``held_s`` is how long the
        condition held within this interval where a counter can tell (pause time); the whole
        interval otherwise. Where ``known`` is false (the rates are unknown: a stale or partial
        snapshot) the streak neither grows nor breaks: missing data is not evidence either way.
        Where ``bridged`` is also true, the unknown interval still counts in its seconds (a short
        blind spell between two polls that showed the condition: persistence is time)."""
        holds = bool(cond.any())
        if holds or self.any_active:
            self.known_ns = np.where(True if known is None else known, ts_ns, self.known_ns)
        if not holds and not self.running:
            return
        fresh = cond & (self.polls == 0)
        self.since_ns[fresh] = ts_ns - int(dt_s * 1e9)
        polls = np.where(cond, self.polls + 1, 0)
        seconds = np.where(cond, self.seconds + (dt_s if held_s is None else held_s), 0.0)
        if known is not None:
            polls = np.where(known, polls, self.polls)
            kept = (
                self.seconds
                if bridged is None
                else np.where(bridged & (self.polls > 0), self.seconds + dt_s, self.seconds)
            )
            seconds = np.where(known, seconds, kept)
        self.polls, self.seconds = polls, seconds
        self.running = holds if known is None else bool((polls > 0).any())

    @property
    def any_active(self) -> bool:
        return bool(self.active.any())

    def start(self, ready: np.ndarray) -> np.ndarray:
        """Mark newly ready elements active; return their flat indices."""
        if not self.running:
            return _NONE
        new = ready & ~self.active
        self.active |= new
        return np.flatnonzero(new)

    def stop(self, done: np.ndarray) -> np.ndarray:
        """Mark finished active elements inactive; return their flat indices."""
        if not self.any_active:
            return _NONE
        ended = done & self.active
        self.active &= ~ended
        return np.flatnonzero(ended)

    def active_indices(self) -> np.ndarray:
        return np.flatnonzero(self.active) if self.any_active else _NONE

    def lapse(self, ts_ns: int, limit_s: float) -> np.ndarray:
        """Stop the active elements no poll has known for over ``limit_s`` (a gap, a group carrying
        nothing, counters unknown): an incident is not held open forever on no data. Their flat
        indices, for ``report``'s ``ended``."""
        if not self.any_active:
            return _NONE
        return self.stop(self.active & (ts_ns - self.known_ns > limit_s * 1e9))

    def report(
        self,
        cleared: np.ndarray,
        make: Callable[[int, bool], T],
        known: np.ndarray | None = None,
        ts_ns: int = 0,
        ended: np.ndarray = _NONE,
    ) -> list[T]:
        """What a detector says each poll: every active element again (stage 2 expires what is not
        refreshed), and each element that just cleared, once. Where ``known`` is false, an active
        element's last known report is said again at ``ts_ns`` (this poll's readings of it are
        not readings); an element ``ended`` for lack of data is cleared from its last report, with
        ``ended`` in its evidence."""
        out = []
        for i in self.active_indices().tolist():
            last = self.said.get(i)
            if last is not None and known is not None and not known.flat[i]:
                out.append(msgspec.structs.replace(last, ts_ns=ts_ns))
            else:
                self.said[i] = made = make(i, True)
                out.append(made)
        for i in cleared.tolist():
            self.said.pop(i, None)
            out.append(make(i, False))
        for i in ended.tolist():
            last = self.said.pop(i, None) or make(i, True)
            blind = f"no poll could read it for {(ts_ns - int(self.known_ns.flat[i])) / 1e9:.0f} s"
            found = {**last.evidence, "ended": blind}
            out.append(msgspec.structs.replace(last, ts_ns=ts_ns, active=False, evidence=found))
        return out


class StreakTable:
    """Streaks per device, reset when a device's shape changes (ports added or removed)."""

    def __init__(self) -> None:
        self._streaks: dict[str, Streak] = {}

    def open(self, device: str) -> bool:
        """Whether a streak of this device is running or reported: its next step matters even
        on a poll where nothing holds."""
        streak = self._streaks.get(device)
        return streak is not None and (streak.running or streak.any_active)

    def get(self, device: str, shape: tuple[int, ...]) -> Streak:
        streak = self._streaks.get(device)
        if streak is None or streak.polls.shape != shape:
            streak = self._streaks[device] = Streak.empty(shape)
        return streak


class WindowPersistence:
    """Per-port history of the last ``window`` polls as a bit mask (newest in bit 0), by slot."""

    def __init__(self, persist: int, window: int) -> None:
        self.persist, self.mask = persist, (1 << window) - 1
        codes = range(1 << window)
        self._count = np.array([bin(c).count("1") for c in codes], dtype=np.int64)
        self._age = np.array([c.bit_length() for c in codes], dtype=np.int64)
        self.history = np.zeros(0, dtype=np.int64)
        self.active = np.zeros(0, dtype=bool)
        self.since_ns = np.zeros(0, dtype=np.int64)

    def grow(self, n: int) -> None:
        extra = n - len(self.history)
        if extra > 0:
            self.history = np.r_[self.history, np.zeros(extra, dtype=np.int64)]
            self.active = np.r_[self.active, np.zeros(extra, dtype=bool)]
            self.since_ns = np.r_[self.since_ns, np.zeros(extra, dtype=np.int64)]

    def step(
        self, slots: np.ndarray, anomalous: np.ndarray, ts_ns: np.ndarray, dt_ns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One poll of distinct slots; returns (active now, cleared now) for those rows. An outlier
        starts at the beginning of the oldest anomalous poll still in the window."""
        h = ((self.history[slots] << 1) | anomalous) & self.mask
        self.history[slots] = h
        was = self.active[slots]
        start = (self._count[h] >= self.persist) & ~was
        cleared = was & (h == 0)
        self.since_ns[slots[start]] = ts_ns[start] - self._age[h[start]] * dt_ns[start]
        now = (was | start) & ~cleared
        self.active[slots] = now
        return now, cleared
