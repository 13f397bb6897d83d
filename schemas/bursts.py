"""What makes a queue's bursts a finding: shared by the microburst detector
(``detectors/microbursts.py``) and the simulator's ground truth for it
(``ingest/simulator/bursts.py``), so both judge a queue by the same numbers."""

from __future__ import annotations

import msgspec

from fabricwatch.schemas.config import AtLeastOne, Fraction, Positive


class MicroburstConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    max_mean_utilisation: Fraction = 0.6
    """A poll whose mean egress rate is at or above this share of line rate is not sub-poll: a
    queue deep in it is the incast's or capacity's business."""
    window_s: Positive = 60.0
    bucket_s: Positive = 10.0
    min_share: Fraction = 0.2
    """Share of the window's polls that burst for the queue to be a finding; it clears below half."""
    min_bursts: AtLeastOne = 3
    stood_marks: Fraction = 0.5
    """On a switch without a queue-depth gauge, a queue that marked this share of what WRED marks
    standing at its watermark's depth stood all poll; a burst marks only the packets it queued."""
    min_pause_fraction: Fraction = 0.01
    """A queue whose port its peer paused for this share of the poll or more was held, not
    bursting: a PFC storm's or a slow receiver's queue stands deep at a low rate."""
    min_coverage: Fraction = 0.5
