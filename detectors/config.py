"""Detector thresholds: derived from physics and from the reference implementations, all settable.

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

from fabricwatch.schemas.config import ConfigFile


class PfcStormConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    detection_time_s: float = 0.2
    restoration_time_s: float = 0.2
    paused_fraction: float = 0.99
    idle_tx_fraction: float = 0.01
    stalled_queue_bytes: float = 150_000.0
    """A switch egress that stalled unpaused fills its queue to the PFC threshold; a few packets
    left on a barely used queue are not that (the default ECN Kmin: past where marking begins)."""


class IncastConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    ecn_kmin_bytes: float = 150_000.0
    ecn_kmax_bytes: float = 1_500_000.0
    band_fraction: float = 0.5
    hold_band_fraction: float = 0.25
    min_egress_utilisation: float = 0.7
    full_poll_utilisation: float = 0.9
    min_fan_in: int = 2
    fan_in_port_fraction: float = 0.05
    sustain_polls: int = 2
    ecn_pmax: float = 0.2
    """WRED's marking probability at Kmax. Where a switch has no queue-depth gauge, a poll in which
    the port ran at line rate with its watermark deep and at least ``band_fraction * ecn_pmax *
    standing_marks`` of the queue's packets marked had its queue deep the whole poll: marks are the
    gauge-less switch's proof that the queue stood rather than peaked once."""
    standing_marks: float = 0.8
    """Share of the marking a queue standing at the deep point would cause, allowing for noise."""


class EcmpConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    window_polls: int = 1
    max_over_mean: float = 1.5
    min_hot_utilisation: float = 0.9
    hold_max_over_mean: float = 1.25
    hold_hot_utilisation: float = 0.7
    persist_polls: int = 3
    polarised_share: float = 0.8
    """A group is polarised when its hottest ``polarised_members`` (at least one) carry this share
    of its traffic while the rest idle: a warning before it saturates."""
    polarised_members: float = 0.125
    """"Few" members, as a share of the group's (one of eight: one of 4-15, two of 16-23, ...)."""
    polarised_min_members: int = 4
    """Smaller groups are left to the saturated test: two flows on one of two members is chance."""
    polarised_hot_utilisation: float = 0.25
    """The hot member must carry real load: a trickle on one uplink is nothing to warn about."""
    polarised_persist_s: float = 30.0
    """Long enough that it is no single flow's burst (seconds, at any poll interval)."""
    saturated_polls: int = 2
    """Polls of a collapse's first ``persist_polls`` in which the hot member must be saturated: the
    hysteresis (``hold_*``) keeps a reported collapse, it must not make one of a single saturated
    poll (uneven hashing in a burst, at 100 ms polls, fired after 0.3 s)."""
    clear_polls: int = 2
    """Polls in a row without skew that end a reported collapse: one noisy reading of a saturated
    uplink (20% noise reads 1.0 as 0.8, under the 0.7 hold with a little more) must not end it and
    start it again a few seconds later as a second incident."""
    max_unknown_polls: int = 4
    """Polls in a row a group's shares may be unknown (a member's rate missing, or the switch not
    refreshed yet) without breaking its streak or its report: an unknown poll is neither skewed
    nor healthy. Past it, the report is no longer refreshed (stage 2 lets it expire)."""


class IncidentConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    resolve_after_s: float = 3.0


class OutlierConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    threshold_quantile: float = 0.9995
    persist_polls: int = 3
    window_polls: int = 4
    batch_rows: int = 4096
    top_features: int = 3
    n_estimators: int = 100
    max_samples: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold_quantile < 1.0:
            raise ValueError("threshold_quantile must be between 0 and 1 (exclusive)")
        if not 1 <= self.persist_polls <= self.window_polls <= 16:
            raise ValueError("need 1 <= persist_polls <= window_polls <= 16")


class DetectorConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pfc_storm: PfcStormConfig = msgspec.field(default_factory=PfcStormConfig)
    incast: IncastConfig = msgspec.field(default_factory=IncastConfig)
    ecmp: EcmpConfig = msgspec.field(default_factory=EcmpConfig)
    incidents: IncidentConfig = msgspec.field(default_factory=IncidentConfig)
    outliers: OutlierConfig = msgspec.field(default_factory=OutlierConfig)
    default_link_gbps: float = 400.0


def load_config(path: str | Path | None) -> DetectorConfig:
    """The ``detectors:`` section of a config file, or the defaults without a path."""
    return ConfigFile(path).section("detectors", DetectorConfig)
