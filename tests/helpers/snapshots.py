"""Reading snapshots in tests, and a clock a test moves by hand."""

from __future__ import annotations

from fabricwatch.schemas.messages import Snapshot


def cell(snap: Snapshot, port: str, name: str, index: int | None = None) -> int | None:
    """The value of counter ``name`` (at ``index``: a priority or queue) on ``port``."""
    col = next(j for j, c in enumerate(snap.counters) if (c.name, c.index) == (name, index))
    return snap.values[snap.ports.index(port)][col]


class Clock:
    """A monotonic clock that stands still until a test sets ``now``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
