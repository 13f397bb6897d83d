"""What makes a queue's bursts a finding: shared by the microburst detector
(``detectors/microbursts.py``) and the simulator's ground truth for it
(``ingest/simulator/bursts.py``), so both judge a queue by the same numbers."""

from __future__ import annotations

import msgspec
import numpy as np

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

    def judged(self, polls: np.ndarray, dt_s: float) -> np.ndarray:
        """Windows read for long enough, in time and in polls, to say anything."""
        return (polls * dt_s >= self.min_coverage * self.window_s) & (polls >= self.min_polls)

    def often(self, bursts: np.ndarray, share: np.ndarray) -> np.ndarray:
        """A window whose queue bursts often enough to be a finding."""
        return (bursts >= self.min_bursts) & (share >= self.min_share)

    def rare(self, bursts: np.ndarray, share: np.ndarray) -> np.ndarray:
        """A window whose bursts have halved, in count or share: the finding clears (between the
        two, it holds; a window of few polls, at 10 s polling, would flap on one burst more or less)."""
        return (2 * bursts < self.min_bursts) | (share < self.min_share / 2)

    @staticmethod
    def drained(read: np.ndarray, peak: np.ndarray, kmin: np.ndarray | float) -> np.ndarray:
        """Whether a queue read at ``read`` bytes after peaking at ``peak`` drained: below Kmin and
        at most half its peak. Found in the suite: queues standing a hair past Kmin at a low rate,
        their reads wandering either side of it, looked drained one poll in five. Unknown reads
        (NaN) do not say it stood."""
        return ~((read >= kmin) | (2 * read > peak))

    min_coverage: Fraction = 0.5
    min_polls: AtLeastOne = 12
    """Polls a window must hold to be judged: at 10 s polling a minute holds six, too few to tell
    often from one burst more or less (found in the suite: findings split in two and flapping).
    Widen ``window_s`` for slow polling."""
