"""Systematic, not random: per port, whether something bad (damaged frames, dropped packets) was
seen in ``persist_polls`` of the last ``window_polls`` polls, and when it stopped for good.

One burst (a reseated cable, a flap, a cosmic ray, one microburst) is not a failing part; the
same thing poll after poll is. The history is a few bits per port (newest in bit 0), so a poll's
work is a handful of array operations whatever the port count. Unknown polls neither extend nor
break a streak and do not count towards recovery: missing data is not a recovery. A streak
whose ports cannot be read for ``lack_of_data_s`` ends for lack of data, never as healed.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np

from fabricwatch.detectors.persistence import LACK_OF_DATA_S
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.detectors.spec import Poll, PollStack
from fabricwatch.schemas.config import AtLeastOne, PollWindow, Positive

_NS = 1_000_000_000


@dataclass
class Ports:
    """One device's streaks, an element per port."""

    history: np.ndarray
    """Per port, the last polls as bits (newest in bit 0): seen in that poll."""
    active: np.ndarray
    since_ns: np.ndarray
    quiet_s: np.ndarray
    """Per port, seconds of known polls without it since the last with it."""
    known_ns: np.ndarray
    peak: np.ndarray
    """Per port, the largest measure of the polls in the window or the active streak."""

    @classmethod
    def empty(cls, n: int) -> Ports:
        zeros = np.zeros(n, dtype=np.int64)
        return cls(zeros.copy(), np.zeros(n, bool), zeros.copy(), np.zeros(n), zeros.copy(), np.zeros(n))

    @property
    def open(self) -> bool:
        return bool(self.history.any() or self.active.any())


@dataclass(frozen=True)
class Step:
    """What one poll did to a device's streaks: masks per port."""

    ports: Ports
    cleared: np.ndarray
    ended: np.ndarray

    def polls(self, p: int) -> int:
        return int(_COUNT[self.ports.history[p]])

    def recovering(self, p: int) -> int:
        """1 where an active port's latest known poll did not see it (it clears after
        ``clear_after_s``): its evidence is no longer the fault's, and says so."""
        return int(not self.ports.history[p] & 1)


_WINDOW_MAX = 8
_COUNT = np.array([bin(c).count("1") for c in range(1 << _WINDOW_MAX)], dtype=np.int64)
_AGE = np.array([c.bit_length() for c in range(1 << _WINDOW_MAX)], dtype=np.int64)


def check_window(persist_polls: int, window_polls: int) -> None:
    """A config's streak must fit its window: more polls than the window holds never happen."""
    if persist_polls > window_polls:
        raise ValueError(f"persist_polls ({persist_polls}) must not be above window_polls ({window_polls})")


class StreakConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The settings of every detector built on ``Systematic``: its section of the ``detectors:``
    config subclasses this, overriding a default where its fault asks for another."""

    persist_polls: AtLeastOne = 2
    """Polls with the condition, of the last ``window_polls``, that make it systematic."""
    window_polls: PollWindow = 3
    clear_after_s: Positive = 30.0
    """Seconds of known polls without it (and at least ``window_polls`` polls) that clear it: an
    intermittent fault (every few polls) stays one incident."""
    lack_of_data_s: Positive = LACK_OF_DATA_S

    def __post_init__(self) -> None:
        check_window(self.persist_polls, self.window_polls)


class Systematic:
    """Per device, per port, a bit history of polls in which a condition was seen."""

    def __init__(
        self, persist_polls: int, window_polls: int, clear_after_s: float, lack_of_data_s: float
    ) -> None:
        if not 0 < window_polls <= _WINDOW_MAX:
            raise ValueError(f"window_polls must be between 1 and {_WINDOW_MAX}, not {window_polls}")
        self.persist_polls = persist_polls
        self.window_polls = window_polls
        self.clear_after_s = clear_after_s
        self.lack_of_data_s = lack_of_data_s
        self._mask = (1 << window_polls) - 1
        self._devices: dict[str, Ports] = {}

    @classmethod
    def of(cls, config: StreakConfig) -> Systematic:
        """From a detector's config section: its ``persist_polls``, ``window_polls``,
        ``clear_after_s`` and ``lack_of_data_s``."""
        return cls(config.persist_polls, config.window_polls, config.clear_after_s, config.lack_of_data_s)

    def open(self, device: str) -> bool:
        state = self._devices.get(device)
        return state is not None and state.open

    def tracked(self, device: str) -> bool:
        return device in self._devices

    def count(
        self,
        frame: RateFrame,
        events: np.ndarray,
        ratio: np.ndarray,
        floor: float,
        regardless: np.ndarray | bool = False,
    ) -> Step:
        """One poll of events per second (damaged frames, drops, resends) and their ratio to the
        traffic: seen where at least one event happened in the poll and the ratio is not below
        ``floor``, or ``regardless`` of it (a lossless class's drops). Unknown traffic (a NaN
        ratio) cannot make events negligible: they still count. Unknown events are unknown."""
        known = np.isfinite(events)
        seen = known & (events * frame.dt_s >= 0.5) & (regardless | ~(ratio < floor))
        return self.step(frame.device, seen, known, ratio, frame.ts_ns, frame.dt_s)

    def step(
        self, device: str, seen: np.ndarray, known: np.ndarray, measure: np.ndarray, ts_ns: int, dt_s: float
    ) -> Step:
        """One poll: ``seen`` where the condition held, ``known`` where the poll could tell,
        ``measure`` its size (the peak kept is the largest of the window's polls that saw it)."""
        n = seen.size
        state = self._devices.get(device)
        if state is None or state.history.size != n:
            state = self._devices[device] = Ports.empty(n)
        if not state.open and not seen.any():
            # The common check of a healthy device: nothing starts, clears or ends, and what else a
            # step keeps is read only of ports in a streak (a port's quiet time and last known
            # read, while active; its peak, while in the window), which begins only at a step
            # that sees it. So the step changes nothing that matters, and a screen may skip it.
            none = np.zeros(n, dtype=bool)
            return Step(state, none, none)
        windowed = state.active | (state.history > 0)
        state.history = np.where(known, ((state.history << 1) | seen) & self._mask, state.history)
        state.known_ns = np.where(known, ts_ns, state.known_ns)
        state.quiet_s = np.where(seen, 0.0, np.where(known, state.quiet_s + dt_s, state.quiet_s))
        started = (_COUNT[state.history] >= self.persist_polls) & ~state.active
        state.since_ns[started] = ts_ns - _AGE[state.history[started]] * int(dt_s * _NS)
        state.active |= started
        counted = np.where(seen, measure, 0.0)
        kept = np.where(windowed, state.peak, 0.0)  # not a streak's that ended before this step
        state.peak = np.where(state.active | (state.history > 0), np.fmax(kept, counted), 0.0)
        quiet_s = max(self.clear_after_s, self.window_polls * dt_s)
        cleared = state.active & known & (state.quiet_s >= quiet_s)
        ended = state.active & (ts_ns - state.known_ns > self.lack_of_data_s * _NS)
        state.active &= ~(cleared | ended)
        state.history[ended] = 0  # a streak found again needs polls that read it
        return Step(state, cleared, ended)


class SignalledStreaks:
    """What every per-port detector of rare events keeps (damaged frames, drops, resends, PCIe
    stalls): its config and a ``Systematic`` history per device. ``calm`` is the common poll:
    none of its ``signals`` above zero and nothing open, about which it has nothing to say."""

    signals: frozenset[str] = frozenset()

    def __init__(self, config: StreakConfig) -> None:
        self._streaks = Systematic.of(config)

    def open(self, device: str) -> bool:
        return self._streaks.open(device)

    def calm(self, frame: RateFrame) -> bool:
        return not self._streaks.tracked(frame.device) and not frame.any_above_zero(self.signals)

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll of a batch's stack (``spec.Screening``): none of the ``signals`` above zero,
        so the poll sees nothing, and on a device with nothing open its step is the healthy one
        (``Systematic.step``), which changes nothing that matters."""
        return ~stack.above_zero(self.signals)

    def pass_over(self, poll: Poll) -> None:
        """A poll the screen passed over leaves nothing to keep."""
