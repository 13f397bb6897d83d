"""What ``fabric.bursts`` carries: one burst capture of one interface (``ingest/nic/burst.py``), per
millisecond, for the store and the report to show beside the poll-rate view of the same host
(``docs/capacity.md``)."""

from __future__ import annotations

import msgspec

from fabricwatch.schemas.wire import SCHEMA_VERSION, check_stamp


class DirectionProfile(msgspec.Struct, frozen=True):
    peak_Bps: float
    """The busiest millisecond's rate, bytes a second."""
    p99_Bps: float
    mean_Bps: float
    hot_s: float
    """Time at 90 % of line rate or more."""
    bursts: int
    """Runs of bins at half of line rate or more."""
    longest_burst_s: float
    per_bin_Bps: list[float]


class BurstProfile(msgspec.Struct, tag="burst_profile", tag_field="type", frozen=True, omit_defaults=True):
    """What a burst capture of one interface saw, per ``bin_s``. ``host`` names the host it ran on
    (as the topology names it) and ``trigger`` why: empty when asked for by hand, else the
    fingerprint of the incident that opened on the host (``fabricwatch collect burst --on-incident``)."""

    netdev: str
    start_ns: int
    seconds: float
    period_s: float
    """The period asked for."""
    achieved_period_s: float
    """The median time between samples."""
    samples: int
    bin_s: float
    line_Bps: float
    rx: DirectionProfile
    tx: DirectionProfile
    rx_packets: int
    tx_packets: int
    host: str = ""
    trigger: str = ""
    unread: int = 0
    """Samples dropped because a counter could not be read (``samples`` counts those kept)."""
    ecn_marked_packets: int | None = None
    """ECN-marked RoCE packets received over the capture (None: no RDMA port to read them from)."""
    cnp_sent: int | None = None
    ecn_per_bin_pps: list[float] = msgspec.field(default_factory=list)
    """ECN-marked packets a second, per bin (empty where unknown)."""
    ecn_refresh_s: float | None = None
    """How often the kernel refreshed those counters (``hw_counters/lifespan``): the marks per bin
    are no finer than that (None: not said)."""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_stamp(self.start_ns)
        if not (self.bin_s > 0 and self.line_Bps > 0 and self.seconds >= 0):
            raise ValueError("bin_s and line_Bps must be positive, seconds not negative")
