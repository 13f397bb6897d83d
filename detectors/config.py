"""Detector thresholds: derived from physics and from the reference implementations, all settable.

Each detector declares its section (``spec.Detector.config``) and keeps its struct in its own
module (``pfc_storm.PfcStormConfig``, ``incast.IncastConfig``, ``ecmp.EcmpConfig``,
``outliers.config.OutlierConfig``); ``DetectorConfig`` is assembled from the registry.

Defaults and where they come from:

* PFC storm — SONiC's PFC watchdog: a queue is stormed when it is paused (pause frames arriving, or
  paused for >= 99% of the interval), has data queued and transmits nothing, for ``detection_time``
  (default 200 ms); it is restored after ``restoration_time`` (200 ms) without new pause frames.
  "Transmits nothing" is taken as < 1% of line rate: a queue paused 99% of the time cannot leak
  more than that.
* Incast — ECN marking (WRED) runs from Kmin = 150 KB to Kmax = 1.5 MB of egress queue (NVIDIA's
  RoCE recommended switch settings). DCQCN holds a busy link with a few senders just above Kmin,
  marking a fraction of a percent of packets: that is a link doing its job. The equilibrium queue
  climbs into the marking band as the number of senders grows, so many-to-one traffic shows as a
  queue peaking past the middle of the band (``band_fraction``), still above Kmin when read (it did
  not drain), fed by several ingress ports. It must hold for ``sustain_polls`` consecutive polls (a
  burst the buffer absorbs shows as one watermark spike and has drained by the next read), unless it
  already drops packets or spreads pauses, or a single poll shows it lasting the whole interval
  (``full_poll_utilisation`` of line rate, the queue deep at its peak and when read). Counting the
  poll in which it began, two polls bound the delay at two poll intervals. Once begun, it holds
  while the peak stays past a quarter of the band (``hold_band_fraction``): hysteresis, so that an
  incast whose queue sits near the start level does not flap with every noisy reading.
  ``min_egress_utilisation`` stands in for the occupancy reading on switches that do not report one.
* ECMP collapse — SONiC's ECMP test calls a group balanced while every member is within +/-25% of
  the mean; we alert at twice that skew (the hottest member carries >= 1.5x the mean) only when that
  member is saturated (>= 90% of line rate over the poll) and for ``persist_polls`` polls.
  Saturation is what makes skew cost bandwidth: the flows on the hot member are held to its rate
  while the others have room. A few flows hashed unevenly on a fabric that is not full are the
  normal statistics of ECMP (max/mean of 2 is common with 4-8 QPs per connection) and cost nothing.
  Once begun it holds down to SONiC's own +/-25% bound and 70% load (``hold_*``: hysteresis against
  noisy readings of a saturated link). Below saturation, a group whose traffic has polarised (80%
  of it on one member in eight, the rest idle, the hot member at >= 25% of line rate) for 30 s is
  a warning: the job's traffic will saturate that member as it grows. Uneven hashing of a few flows
  spreads them over several members; one flow bursting on one member is over in seconds.
  Normalised entropy and the coefficient of variation are
  reported as evidence but do not gate: with eight members, one saturated uplink beside seven at a
  quarter load still has entropy 0.92, so an entropy threshold would have to depend on the group
  size.
* Device silence — a device is dark once it has missed ``dark_after_polls`` (10) of its own polls
  and at least ``min_dark_s`` (30 s): missed polls are routine (a slow switch CLI, a collector
  restart, a lossy management network), ten in a row are not. A collector that loses 15% of its
  polls misses five in a row about once per 13,000 polls, and paged at five (found at 2 s polls,
  issue 33's heavy-faults scenario); ten in a row, once per 170 million. Timed on the fabric's
  clock, not the wall's.
* Learned outliers — no threshold is set by hand. A port class's threshold is the
  ``threshold_quantile`` of its IsolationForest's scores on the baseline (0.9995: one baseline
  poll in two thousand scores above it); a health feature (errors, retransmissions, a queue on an
  idle line) above its baseline maximum makes a poll anomalous by itself. A port must be anomalous
  in ``persist_polls`` of its last ``window_polls`` polls (Netdata: single scores are noisy).
  ``n_estimators``, ``max_samples`` and ``seed`` are the forest's (Liu et al.'s 100 trees of 256
  samples) and apply at training; the quantile can be changed without retraining.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from fabricwatch.detectors.registry import REGISTRY, Registry
from fabricwatch.schemas.config import ConfigFile


class IncidentConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    resolve_after_s: float = 3.0
    unrefreshed_s: float = 35.0
    """How long an active symptom its detector stops saying again is kept. Detectors say an active
    symptom at every poll and clear it when it ends, so one that is not said again comes from a
    device that stopped reporting: kept past ``silence.min_dark_s`` (30 s), the device's silence
    is found first and holds its incidents open (found: a storm whose root went dark was called
    over 3 polls later, before its silence could be seen)."""


def config_type(registry: Registry) -> type[msgspec.Struct]:
    """The ``detectors:`` section: one sub-section per registered detector that declares one
    (``spec.Detector.config``), stage 2's ``incidents:`` and the default link speed. Made from the
    declarations, so a new detector's settings need no edit here."""
    sections = [
        (key, struct, msgspec.field(default_factory=struct)) for key, struct in registry.sections.items()
    ]
    return msgspec.defstruct(
        "DetectorConfig",
        [
            *sections,
            ("incidents", IncidentConfig, msgspec.field(default_factory=IncidentConfig)),
            ("default_link_gbps", float, 400.0),
        ],
        module=__name__,
        forbid_unknown_fields=True,
        frozen=True,
    )


DetectorConfig = config_type(REGISTRY)
"""The shipped detectors' config (a module attribute, so that it pickles)."""


def load_config(path: str | Path | None) -> DetectorConfig:
    """The ``detectors:`` section of a config file, or the defaults without a path."""
    return ConfigFile(path).section("detectors", DetectorConfig)
