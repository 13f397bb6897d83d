"""What ``fabric.rhythm`` carries: the period each NIC's traffic repeats with, as stage 1's rhythm
detector judged it (``detectors/traffic_rhythm.py``), for the store. A finding says a period only
when it changes; these say it at every judgment, so that each job's rhythm can be drawn over time
and set beside the step time its own records give (``docs/capacity.md``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec

from fabricwatch.schemas.wire import SCHEMA_VERSION, check_stamp


class Periods(msgspec.Struct, tag="periods", tag_field="type", omit_defaults=True):
    """The judgments of many NICs, column by column: NIC ``i`` was judged at ``ts_ns[i]`` to repeat
    every ``period_s[i]`` seconds with autocorrelation ``strength[i]``. ``usual_s`` is the period
    it had learned by then (None: none yet), ``rate_Bps`` its mean bytes a second (sent and
    received) over the judged window (None: unknown). A judgment that read no period is not sent: no rhythm is
    unknown, not a period of zero."""

    devices: list[str]
    ts_ns: list[int]
    period_s: list[float]
    strength: list[float]
    usual_s: list[float | None]
    rate_Bps: list[float | None]
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        n = len(self.devices)
        for name in ("ts_ns", "period_s", "strength", "usual_s", "rate_Bps"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries but there are {n} devices")
        for ts_ns in self.ts_ns:
            check_stamp(ts_ns)
        for name, ok, what in _FIGURES:
            for x in getattr(self, name):
                if x is not None and not (math.isfinite(x) and ok(x)):
                    raise ValueError(f"{name} has {x}: not a {what}")


_FIGURES: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("period_s", lambda x: x > 0, "positive number of seconds"),
    ("strength", lambda x: x >= -1, "finite correlation (-1 or more)"),
    ("usual_s", lambda x: x > 0, "positive number of seconds"),
    ("rate_Bps", lambda x: x >= 0, "rate (bytes a second, not negative)"),
)
"""Each figure's test (``None``, unknown, passes): a NaN or an infinity is never a figure."""


def known(x: float) -> float | None:
    """A figure for the wire: JSON has no NaN, and unknown is None."""
    return x if x == x else None
