"""Learned outliers: one unsupervised model per port class, trained on baseline traffic.

The rule detectors know three failure modes; a link that corrupts packets, a NIC that silently
runs at half its rate, or anything else nobody wrote a rule for, only shows as a port whose
counters no longer look like they did while the fabric was healthy.

* **Features** are ratios, never load itself: training load changes all the time, and a model
  that learned the baseline's load levels would page on every new job. Errors, retransmissions,
  discards, ECN marks and CNPs are counted per packet (ppm), pauses as a share of the time, queue
  occupancy as the delay it adds at line rate, each in whole units (a fraction of a ppm or of a
  microsecond is noise, not a signal) and through ``log1p`` so that decades weigh alike.
* **Health features** should stay at their baseline level whatever the load: errors and
  retransmissions, and a switch port's queue weighted by the share of the interval its line was
  idle, neither sending nor paused (``queue_delay*idle_tx``). A work-conserving port only queues
  while it sends at line rate, so a standing queue on a half-idle line means the link carries less
  than its rate: that is how a NIC whose bandwidth silently halved shows, at the leaf port in front
  of it. A health feature above anything the baseline saw makes a port anomalous by itself.
* **Load-shaped features** (ECN, CNPs, pauses, queue delay, drops) move with congestion, which is
  normal in training; only their combination is judged, by an IsolationForest per port class
  (``nic``, ``host_facing``, ``fabric``), scored here from the fitted trees' own arrays (the same
  numbers as ``score_samples`` without its milliseconds of per-call overhead, which would dominate
  stage 1 at one batch per poll). No scaler: a forest's splits are drawn between each feature's
  minimum and maximum, so it is invariant to per-feature scaling. A forest cannot extrapolate
  (a value beyond the baseline scores like the baseline's extreme) nor split on a feature that
  never moved: that is why health features are also checked against the baseline's maximum.
* **Threshold**: the configured quantile of the forest's scores on the baseline, per class.
* **Persistence**: a port is an outlier once ``persist_polls`` of its last ``window_polls`` polls
  were anomalous, and clears after a whole window without one (Netdata's lesson: single scores are
  noisy, nothing pages on one of them).
"""

from fabricwatch.detectors.outliers.model import ModelError, OutlierModel
from fabricwatch.detectors.outliers.online import (
    FeatureCollector,
    OutlierDetector,
    OutlierStage,
    load_detector,
)

__all__ = [
    "FeatureCollector",
    "ModelError",
    "OutlierDetector",
    "OutlierModel",
    "OutlierStage",
    "load_detector",
]
