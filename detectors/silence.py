"""A device that stops reporting is an incident of its own: silence is not health.

Every other detector speaks about polls it is given; a device whose collector died, whose switch
rebooted or whose host hung gives none, and its incidents would resolve as if it had healed. The
watch keeps, per device, when it was last seen and its usual poll interval, and at most once a
second of the fabric's time (stage 1's clock, never the wall's: a replay ages its devices at the
speed of its trace) finds the devices dark for ``dark_after_polls`` of their polls and at least
``min_dark_s``. Each gets a ``device_silent`` symptom at every sweep, which stage 2 holds until the
watch clears it: the device polled again, it stayed dark past ``forget_after_s`` (decommissioned, or
moved), or its input partition was handed to another worker (``forget``). While the incident is
open, the device's other incidents stay open too (``blinds``): what they would show is unknown. The
first poll after a dark spell is not judged by the other detectors: its rates average the whole
spell.

A device is timed against the newest time read from its own input partition, so that a partition
read behind the others (a backlog after a rebalance) holds devices that are late, not dark; a
partition whose every device went dark at once sees no time pass. That case (a whole collector down) is
what each collector's ``/healthz`` and Prometheus' ``up`` are for
(``deploy/prometheus/fabricwatch-rules.yml``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, SymptomKind
from fabricwatch.detectors.waves import waves
from fabricwatch.schemas.config import AtLeastOne, Positive
from fabricwatch.schemas.messages import RootCause, Symptom

_NS = 1_000_000_000
_SWEEP_NS = _NS
"""How often (fabric time) the watch looks for dark devices."""
_INTERVAL_WEIGHT = 0.2
"""Of a new gap in a device's moving average interval; gaps over 3 intervals (a dark spell) are not
averaged in, or a device back from an outage would take that long to be missed again."""


class SilenceConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    dark_after_polls: AtLeastOne = 10
    """A device is dark after this many of its polls without one (a missed poll or two is routine)."""
    min_dark_s: Positive = 30.0
    """And never before this long: a collector restart takes a few seconds."""
    established_polls: AtLeastOne = 3
    """Polls a device must have sent before its silence means anything: a stray snapshot (a
    renamed device, a test publish) is not a device that went dark."""
    forget_after_s: Positive = 3600.0
    """A device dark this long is no longer watched (its incident resolves, saying so) until it
    reports again: a removed device must not page forever."""


class SilenceWatch:
    """Per device: last seen, moving poll interval, whether it is reported dark. Arrays indexed by
    device, so that a sweep over a fabric's thousands of devices is a few numpy passes."""

    def __init__(self, config: SilenceConfig) -> None:
        self.config = config
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        self._kinds: list[str] = []
        self._last = np.zeros(64, np.int64)
        self._interval = np.full(64, np.nan)
        self._dark = np.zeros(64, bool)
        self._watched = np.zeros(64, bool)
        self._polls = np.zeros(64, np.int64)
        self._source = np.zeros(64, np.int64)
        self._sources: dict[str, int] = {}
        """Input partitions, numbered: a device is timed by the newest time read from its own."""
        self._swept_ns = 0

    def seen(self, device: str, device_kind: str, ts_ns: int, source: str = "") -> bool:
        """Whether this poll ends a dark spell of its device: its rates are averages over the
        spell, which say nothing of the device now."""
        i = self._index.get(device)
        returning = False
        if i is None:
            i = self._add(device, device_kind)
        elif self._polls[i]:
            gap = (ts_ns - int(self._last[i])) / _NS
            if gap <= 0:
                return False
            # Python floats, not numpy scalars: per poll, numpy's per-element calls were a fifth of
            # the NIC path (nan_to_num alone 10 µs a snapshot on this machine)
            typical = float(self._interval[i])
            unknown = math.isnan(typical)
            threshold = max(
                self.config.min_dark_s, self.config.dark_after_polls * (0.0 if unknown else typical)
            )
            returning = bool(self._watched[i]) and gap > threshold
            if unknown:
                self._interval[i] = gap
            elif gap <= 3 * typical:
                self._interval[i] = typical + _INTERVAL_WEIGHT * (gap - typical)
        self._polls[i] += 1
        self._source[i] = self._sources.setdefault(source, len(self._sources))
        self._watched[i] = self._polls[i] >= self.config.established_polls
        self._last[i] = max(int(self._last[i]), ts_ns)
        return returning

    def seen_many(
        self, devices: Sequence[str], kinds: Sequence[str], ts_ns: Sequence[int], sources: Sequence[str]
    ) -> list[int]:
        """``seen`` of each poll in turn, with the same results, in a few numpy passes per wave of
        the batch (a device's second poll in it waits for the second wave): a worker's batch is a
        thousand polls, and ``seen``'s scalar reads of numpy arrays were 4 % of stage 1. Returns
        the positions of the polls that end a dark spell."""
        where = np.array([self._row(d, kind) for d, kind in zip(devices, kinds, strict=True)], np.int64)
        numbered = np.array([self._sources.setdefault(s, len(self._sources)) for s in sources], np.int64)
        stamps = np.asarray(ts_ns, dtype=np.int64)
        returning: list[int] = []
        for wave in waves(devices):
            k = np.array(wave)
            returning += k[self._seen_wave(where[k], stamps[k], numbered[k])].tolist()
        return sorted(returning)

    def _seen_wave(self, i: np.ndarray, ts_ns: np.ndarray, source: np.ndarray) -> np.ndarray:
        """``seen`` of polls of distinct devices (rows ``i``): which end a dark spell."""
        c = self.config
        had = self._polls[i] > 0
        gap = (ts_ns - self._last[i]) / _NS
        late = had & (gap <= 0)  # ``seen`` changes nothing for these
        typical = self._interval[i]
        unknown = np.isnan(typical)
        threshold = np.maximum(c.min_dark_s, c.dark_after_polls * np.where(unknown, 0.0, typical))
        judged = had & ~late
        returning = judged & self._watched[i] & (gap > threshold)
        averaged = typical + _INTERVAL_WEIGHT * (gap - typical)
        interval = np.where(unknown, gap, np.where(gap <= 3 * typical, averaged, typical))
        self._interval[i[judged]] = interval[judged]
        taken = i[~late]
        self._polls[taken] += 1
        self._source[taken] = source[~late]
        self._watched[taken] = self._polls[taken] >= c.established_polls
        self._last[taken] = np.maximum(self._last[taken], ts_ns[~late])
        return returning

    def _threshold_s(self, interval: np.ndarray) -> np.ndarray:
        """How long each device may be silent before it is dark (``seen`` does the same for one)."""
        return np.maximum(self.config.min_dark_s, self.config.dark_after_polls * np.nan_to_num(interval))

    def sweep(self, now_ns: int, by_source: Mapping[str, int] | None = None) -> list[Symptom]:
        """A symptom for every dark device (again at each sweep: stage 2 learns from them how soon
        a clear is final), clears for those back (or forgotten) since the last sweep; nothing if
        less than a second of fabric time passed. A device is timed by ``by_source``'s time of its
        input partition where given (``now_ns`` otherwise): a partition read behind the others
        (a backlog after a rebalance) holds devices that are late, not dark."""
        if now_ns - self._swept_ns < _SWEEP_NS:
            return []
        self._swept_ns = now_ns
        n = len(self._names)
        watched, dark = self._watched[:n], self._dark[:n]
        threshold_ns = self._threshold_s(self._interval[:n]) * _NS  # known for every watched device
        known = by_source or {}
        nows = np.array([known.get(source, now_ns) for source in self._sources] or [now_ns], np.int64)
        at_ns = nows[self._source[:n]]
        silent_ns = at_ns - self._last[:n]
        dark_now = watched & (silent_ns > threshold_ns)
        gone = dark_now & (silent_ns > self.config.forget_after_s * _NS)
        out = [self._symptom(i, int(at_ns[i]), True) for i in np.flatnonzero(dark_now & ~gone)]
        out += [self._symptom(i, int(at_ns[i]), False) for i in np.flatnonzero(dark & ~dark_now)]
        out += [self._symptom(i, int(at_ns[i]), False, "forgotten") for i in np.flatnonzero(dark & gone)]
        self._dark[:n] = dark_now & ~gone
        self._watched[:n] &= ~gone
        self._polls[:n][gone] = 0
        return out

    def forget(self, devices: Iterable[str], now_ns: int) -> list[Symptom]:
        """Stop watching these devices (their partition went to another worker): clears for the
        ones reported dark, since only this watch could clear them."""
        out = []
        for device in devices:
            i = self._index.get(device)
            if i is None:
                continue
            if self._dark[i]:
                out.append(self._symptom(i, now_ns, False, "handed over"))
            self._dark[i] = self._watched[i] = False
            self._polls[i] = 0
            self._interval[i] = np.nan
        return out

    def _row(self, device: str, device_kind: str) -> int:
        i = self._index.get(device)
        return self._add(device, device_kind) if i is None else i

    def _add(self, device: str, device_kind: str) -> int:
        i = len(self._names)
        if i == len(self._last):
            grow = len(self._last)
            self._last = np.concatenate([self._last, np.zeros(grow, np.int64)])
            self._interval = np.concatenate([self._interval, np.full(grow, np.nan)])
            self._dark = np.concatenate([self._dark, np.zeros(grow, bool)])
            self._watched = np.concatenate([self._watched, np.zeros(grow, bool)])
            self._polls = np.concatenate([self._polls, np.zeros(grow, np.int64)])
            self._source = np.concatenate([self._source, np.zeros(grow, np.int64)])
        self._index[device] = i
        self._names.append(device)
        self._kinds.append(device_kind)
        return i

    def _symptom(self, i: int, now_ns: int, active: bool, why: str = "") -> Symptom:
        last = int(self._last[i])
        interval = self._interval[i]
        found: dict[str, float | int | str] = {
            "device_kind": self._kinds[i],
            "silent_s": round(max(0, now_ns - last) / _NS, 1),
            "last_seen_ns": last,
        }
        if not np.isnan(interval):
            found["poll_interval_s"] = round(float(interval), 3)
        if why:
            found["cleared"] = why
        return Symptom(
            kind="device_silent",
            device=self._names[i],
            ts_ns=now_ns,
            start_ns=last,
            active=active,
            evidence=found,
        )


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    device = incident.root.device
    kind = str(latest.evidence.get("device_kind", ""))
    if kind == "switch":
        incident.severity = "critical"  # a switch's every port, and the paths through it, unknown
        hosts = d.fabric.hosts_under(device)
    else:
        hosts = {d.fabric.host_of(device)}
    incident.hosts |= hosts
    d.jobs.attach(incident, hosts, incident.start_ns)
    every = latest.evidence.get("poll_interval_s")
    usual = f" (it polled every {every} s)" if every is not None else ""
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    incident.summary = (
        f"{device} sent nothing for over {latest.evidence.get('silent_s')} s{usual}: its collector, the "
        f"device or the path between them is down, and what it would show is unknown{job}"
    )


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """Dark for its threshold, then found at the next sweep of the fabric's clock."""
    silence = config.silence
    return max(silence.min_dark_s, silence.dark_after_polls * poll_s) + poll_s + _SWEEP_NS / _NS


SILENT = IncidentKind(
    name="device_silent",
    title="Device silent",
    colour="tab:gray",
    hint=(
        "Check the device's collector (its /healthz and log), then the device and the path to it. "
        "Its other incidents stay open until it reports again: their silence is not a recovery."
    ),
    describe=describe,
    delay_bound_s=_delay_bound_s,
    delay="max(min_dark_s, dark_after_polls x poll) + 1 poll + 1 s",
    blinds=True,
)

DETECTOR = Detector(
    name="silence",
    symptoms=(
        SymptomKind(
            "device_silent",
            "device_silent",
            lambda placement, key, sym: RootCause(sym.device),
            until_cleared=True,
        ),
    ),
    incidents=(SILENT,),
    watch=lambda config: SilenceWatch(config.silence),
    config=("silence", SilenceConfig),
)
