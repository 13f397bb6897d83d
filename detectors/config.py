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
  burst the buffer absorbs shows as one watermark spike and has drained by the next read), unless
  it already drops packets or spreads pauses. Counting the poll in which it began, two polls bound
  the delay at two poll intervals. ``min_egress_utilisation`` stands in for the occupancy reading on
  switches that do not report one.
* ECMP collapse — SONiC's ECMP test calls a group balanced while every member is within +/-25% of
  the mean; we alert at twice that skew (the hottest member carries >= 1.5x the mean) only when
  that member runs at >= 50% of its line rate (a quiet fabric is not imbalanced) and for
  ``persist_polls`` polls. Normalised entropy and the coefficient of variation are reported as
  evidence but do not gate: with eight members, one saturated uplink beside seven at a quarter
  load still has entropy 0.92, so an entropy threshold would have to depend on the group size.
"""

from __future__ import annotations

from pathlib import Path

import msgspec


class PfcStormConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    detection_time_s: float = 0.2
    restoration_time_s: float = 0.2
    paused_fraction: float = 0.99
    idle_tx_fraction: float = 0.01


class IncastConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    ecn_kmin_bytes: float = 150_000.0
    ecn_kmax_bytes: float = 1_500_000.0
    band_fraction: float = 0.5
    min_egress_utilisation: float = 0.7
    min_fan_in: int = 2
    fan_in_port_fraction: float = 0.05
    sustain_polls: int = 2


class EcmpConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    window_polls: int = 1
    max_over_mean: float = 1.5
    min_hot_utilisation: float = 0.5
    persist_polls: int = 3


class IncidentConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    resolve_after_s: float = 3.0


class DetectorConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pfc_storm: PfcStormConfig = msgspec.field(default_factory=PfcStormConfig)
    incast: IncastConfig = msgspec.field(default_factory=IncastConfig)
    ecmp: EcmpConfig = msgspec.field(default_factory=EcmpConfig)
    incidents: IncidentConfig = msgspec.field(default_factory=IncidentConfig)
    default_link_gbps: float = 400.0


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the key and the problem."""


def load_config(path: str | Path | None) -> DetectorConfig:
    """Read a YAML config (the ``detectors:`` section is optional), or the defaults without a path."""
    if path is None:
        return DetectorConfig()
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    section = doc.get("detectors", doc) if isinstance(doc, dict) else doc
    try:
        return msgspec.convert(section, DetectorConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from None
