"""The capacity band: what utilisation a link may run at and still have room for bursts. Shared
by the capacity detector (``detectors/capacity.py``) and the simulator's ground truth for it
(``ingest/simulator/hot_links.py``), so both judge a link by the same numbers."""

from __future__ import annotations

import msgspec

from fabricwatch.schemas.config import Fraction, Positive


class CapacityConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    band_top: Fraction = 0.8
    """Mean utilisation from which a link or group runs hot (the brief's 60-80 % band's top)."""
    band_bottom: Fraction = 0.6
    """Mean utilisation from which peaks at ``peak`` leave a link no room for bursts."""
    peak: Fraction = 0.95
    """Utilisation that leaves no room for a burst."""
    peak_share: Fraction = 0.01
    """Share of the window's polls at or above ``peak`` that is the p99 reaching it."""
    window_s: Positive = 300.0
    bucket_s: Positive = 60.0
    min_coverage: Fraction = 0.5
    clear_margin: Fraction = 0.05
