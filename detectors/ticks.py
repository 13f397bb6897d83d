"""When stage 2 evaluates, shared by the in-process pipeline and the streaming stage-2 worker."""

from __future__ import annotations


class Ticker:
    """When stage 2 evaluates: as input time passes each ``tick_s``, *before* taking the record
    that crossed it, at the latest time seen so far. Snapshots of one poll arrive in a burst, and
    evaluating at the end of the burst is what a worker ticking on a wall clock would do; driving
    it by input time makes a replay at any speed give the same answer."""

    def __init__(self, tick_s: float) -> None:
        self.tick_ns = int(tick_s * 1e9)
        self.now_ns = 0
        self._next_ns: int | None = None

    def due(self, ts_ns: int) -> int | None:
        """The time to evaluate at before taking a record stamped ``ts_ns``, or None."""
        if self._next_ns is None:
            self._next_ns = ts_ns + self.tick_ns
            return None
        if ts_ns < self._next_ns:
            return None
        self._next_ns = ts_ns + self.tick_ns
        return self.now_ns

    def seen(self, ts_ns: int) -> None:
        self.now_ns = max(self.now_ns, ts_ns)

    def force(self) -> int:
        """Evaluate now, at the latest time seen: the caller knows the burst is complete."""
        self._next_ns = self.now_ns + self.tick_ns
        return self.now_ns
