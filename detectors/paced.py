"""When a paced detector (``spec.Detector.paced``) checks a device: once every ``every_s`` seconds
of the device's own time, whatever its polls show.

A degrading optic or a port that came up at half speed changes over minutes to days, and what
shows it never reads zero on a healthy port (corrected FEC bits, a speed, a laser's power). Looking
at every poll would cost every poll; looking at one poll in ``every_s`` costs a dict lookup on the
others and finds such a fault within a few checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fabricwatch.detectors.rates import RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.detectors.systematic import Step, StreakConfig, Systematic
from fabricwatch.schemas.config import Positive

_NS = 1_000_000_000


class Pacer:
    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._every_ns = int(every_s * _NS)
        self._next: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._span_s: dict[str, float] = {}

    def due(self, device: str, ts_ns: int) -> bool:
        """True (and the check counted as made) from the device's due time on, or at its first
        poll; a poll stamped earlier (a reordered one) is not due. Due times step by ``every_s``
        from the first check, so a poll's jitter never slips the next one."""
        due_ns = self._next.get(device)
        if due_ns is not None and ts_ns < due_ns:
            return False
        step = due_ns + self._every_ns if due_ns is not None else ts_ns + self._every_ns
        self._next[device] = step if step > ts_ns else ts_ns + self._every_ns  # after a gap: afresh
        last = self._last.get(device)
        self._last[device] = ts_ns
        self._span_s[device] = self.every_s if last is None else (ts_ns - last) / _NS
        return True

    def next_due_ns(self, device: str) -> int | None:
        return self._next.get(device)

    def span_s(self, device: str, poll_s: float) -> float:
        """Seconds the device's latest check stands for, so that a streak's start and its quiet
        time count checks, not polls: since the check before, at most a pace (or a poll, if
        longer). A gap without polls is no evidence of health: it counts as one check's time."""
        return min(self._span_s.get(device, self.every_s), max(self.every_s, poll_s))


def delay_bound(section: str, polls: int) -> Callable[[float, Any, str], float]:
    """A paced kind's latency promise: ``persist_polls`` checks of its config ``section``, the
    first up to ``every_s`` after the fault began, then ``polls`` polls (a wait for the far end,
    the tick that fires it)."""

    def bound(poll_s: float, config: Any, severity: str) -> float:
        cfg = getattr(config, section)
        return (cfg.persist_polls + 1) * max(cfg.every_s, poll_s) + polls * poll_s

    return bound


class PacedConfig(StreakConfig, forbid_unknown_fields=True, frozen=True):
    """A paced detector's section: its streaks count checks, ``every_s`` apart."""

    every_s: Positive = 10.0
    """Seconds between two checks of a device."""


class PacedStreaks:
    """What every paced per-port detector keeps: when each device is due, and per port a bit
    history of checks (``systematic.Systematic``) whose time is the checks', not the polls'."""

    def __init__(self, config: PacedConfig) -> None:
        self._pacer = Pacer(config.every_s)
        self._streaks = Systematic.of(config)
        self.every_s = config.every_s

    def due(self, device: str, ts_ns: int) -> bool:
        return self._pacer.due(device, ts_ns)

    def open(self, device: str) -> bool:
        return self._streaks.open(device)

    def next_due_ns(self, device: str) -> int | None:
        return self._pacer.next_due_ns(device)

    def pass_over(self, poll: Poll) -> None:
        """A due check its screen passed over (``spec.Screening``): it saw nothing on a device with
        nothing open, and leaves nothing a later step reads (``Systematic.step``)."""

    def step(self, frame: RateFrame, seen: np.ndarray, known: np.ndarray, measure: np.ndarray) -> Step:
        """This check: ``seen`` where the condition held, ``known`` where it could tell."""
        span_s = self._pacer.span_s(frame.device, frame.dt_s)
        return self._streaks.step(frame.device, seen, known, measure, frame.ts_ns, span_s)
