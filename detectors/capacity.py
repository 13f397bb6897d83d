"""Links and uplink groups that run hot between the incidents (kind ``capacity``).

A training fabric's links should average 60-80 % of line rate with peaks below 95 %, leaving room
for bursts; a link or an ECMP group that averages more, or whose 99th percentile reaches 95 %, has
no headroom left and needs capacity, not an incident page. Per switch port (the busier of its two
directions: every link of a leaf-spine fabric has a switch end) and per uplink group (its members'
bytes over their line rate), over a sliding ``window_s``:

* mean utilisation at or above ``band_top``, or
* within the band (a mean of ``band_bottom`` or more), a share of polls at or above ``peak`` of
  ``peak_share`` or more: the p99 reaching it, no room left for bursts. A link that idles between
  spells at line rate (an incast's receiver, a job's bursts) has room: those spells are the
  incidents' and the microbursts' business, not capacity's

makes the finding; it clears when the mean falls ``clear_margin`` below the band and the peaks stop.
A window with polls for less than ``min_coverage`` of its time is not judged: missing data is
unknown, so a finding neither starts nor clears on it. The window is kept as per-``bucket_s``
sums, so a port costs a few numbers per bucket, not one per poll.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.evidence import evidence, seen_now
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, Poll, SymptomKind
from fabricwatch.detectors.windows import DeviceWindows, window_delay
from fabricwatch.schemas.capacity import CapacityConfig
from fabricwatch.schemas.messages import RootCause, Symptom

_NS = 1_000_000_000


@dataclass
class _Window:
    """One device's rows (its ports, then its uplink groups) over the window's buckets."""

    rows: tuple[str, ...]
    members: np.ndarray
    """Per uplink group, its members' port indices, padded with -1."""
    sums: np.ndarray
    counts: np.ndarray
    peaks: np.ndarray
    polls_s: np.ndarray
    """Seconds of polls each bucket holds (a poll that read nothing still counts as read)."""
    bucket: int
    since_ns: np.ndarray
    active: np.ndarray
    mean: np.ndarray
    """As of the latest bucket judged: each row's mean utilisation and share of polls at the peak."""
    at_peak: np.ndarray


class Capacity(DeviceWindows[_Window]):
    def __init__(self, config: CapacityConfig) -> None:
        super().__init__(_Window, config.window_s, config.bucket_s)
        self.config = config

    def record(self, poll: Poll) -> None:
        """Add the poll's utilisation to the current bucket, judging the window when one closes."""
        frame = poll.frame
        rx, tx = frame.port("rx_bytes"), frame.port("tx_bytes")
        if rx is None and tx is None:
            return
        busiest = np.fmax(rx, tx) if rx is not None and tx is not None else (rx if rx is not None else tx)
        w = self._window(frame.device, tuple(frame.ports), poll)
        util = np.concatenate([busiest / poll.line_Bps, _group_util(w.members, tx, poll.line_Bps)])
        bucket = frame.ts_ns // self._bucket_ns
        if bucket > w.bucket:
            self._judged(frame.device, self._judge(w, frame.ts_ns, frame.dt_s))
            self._advance(w, bucket)
        known = np.isfinite(util)
        i = w.bucket % self._buckets
        w.sums[:, i] += np.where(known, util, 0.0)
        w.counts[:, i] += known
        w.peaks[:, i] += known & (util >= self.config.peak)
        w.polls_s[i] += frame.dt_s

    def _window(self, device: str, ports: tuple[str, ...], poll: Poll) -> _Window:
        w = self._devices.get(device)
        if w is not None and w.rows[: len(ports)] == ports:
            return w
        at = {p: i for i, p in enumerate(ports)}
        groups = [
            (g.id, [at[m] for m in g.members if m in at])
            for g in poll.fabric.ecmp_groups(device)
            if sum(m in at for m in g.members) >= 2
        ]
        members = np.full((len(groups), max((len(m) for _, m in groups), default=0)), -1, dtype=np.intp)
        for i, (_, m) in enumerate(groups):
            members[i, : len(m)] = m
        n, b = len(ports) + len(groups), self._buckets
        w = self._devices[device] = _Window(
            rows=ports + tuple(gid for gid, _ in groups),
            members=members,
            sums=np.zeros((n, b)),
            counts=np.zeros((n, b), dtype=np.int64),
            peaks=np.zeros((n, b), dtype=np.int64),
            polls_s=np.zeros(b),
            bucket=poll.frame.ts_ns // self._bucket_ns,
            since_ns=np.zeros(n, dtype=np.int64),
            active=np.zeros(n, dtype=bool),
            mean=np.full(n, np.nan),
            at_peak=np.full(n, np.nan),
        )
        return w

    def _judge(self, w: _Window, ts_ns: int, dt_s: float) -> np.ndarray:
        """The window as of a bucket's close: rows that start running hot and rows that clear."""
        c = self.config
        if w.polls_s.sum() < c.min_coverage * c.window_s:
            return np.zeros(len(w.rows), dtype=bool)  # too little read: unknown, nothing changes
        n = w.counts.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = w.sums.sum(axis=1) / n
            peaks = w.peaks.sum(axis=1) / n
        judged = n * dt_s >= c.min_coverage * c.window_s
        hot = judged & ((mean >= c.band_top) | ((mean >= c.band_bottom) & (peaks >= c.peak_share)))
        cool = judged & (mean < c.band_top - c.clear_margin) & (peaks < c.peak_share)
        w.since_ns[hot & ~w.active] = ts_ns - int(c.window_s * _NS)
        cleared = w.active & cool
        w.active = (w.active | hot) & ~cool
        w.mean, w.at_peak = mean, peaks
        return cleared

    def _advance(self, w: _Window, bucket: int) -> None:
        for b in range(w.bucket + 1, min(bucket, w.bucket + self._buckets) + 1):
            i = b % self._buckets
            w.sums[:, i], w.counts[:, i], w.peaks[:, i], w.polls_s[i] = 0.0, 0, 0, 0.0
        w.bucket = bucket

    def _symptoms(self, device: str, ts_ns: int, w: _Window, cleared: np.ndarray) -> list[Symptom]:
        n_ports = len(w.rows) - len(w.members)

        c = self.config

        def one(r: int, on: bool) -> Symptom:
            port, group = (w.rows[r], "") if r < n_ports else ("", w.rows[r])
            found = evidence(
                3,
                mean_util=float(w.mean[r]),
                at_peak=float(w.at_peak[r]),
                peak=c.peak,
                no_room=int(w.at_peak[r] >= c.peak_share and w.mean[r] >= c.band_bottom),
                window_s=c.window_s,
            )
            return Symptom(
                "link_hot", device, ts_ns, int(w.since_ns[r]), on, port, group=group, evidence=found
            )

        return [one(r, True) for r in np.flatnonzero(w.active)] + [
            one(r, False) for r in np.flatnonzero(cleared)
        ]


def _group_util(members: np.ndarray, tx: np.ndarray | None, line_Bps: np.ndarray) -> np.ndarray:
    """Each uplink group's bytes sent over its members' line rate (NaN where a member is unknown),
    all groups in one pass."""
    if not members.size or tx is None:
        return np.full(len(members), np.nan)
    real = members >= 0
    sent = np.where(real, tx[members], 0.0).sum(axis=1)
    return sent / np.where(real, line_Bps[members], 0.0).sum(axis=1)


def capacity_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause:
    return RootCause(sym.device, sym.port, group=sym.group)


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = seen_now(incident, [s for s in group.members if s.kind == "link_hot"])
    if not own:
        return
    latest = max(own, key=lambda s: s.ts_ns)
    ev = latest.evidence
    mean, at_peak = float(ev.get("mean_util", 0.0)), float(ev.get("at_peak", 0.0))
    no_room = bool(ev.get("no_room"))
    incident.severity = "warning" if no_room else "info"
    incident.devices.add(incident.root.device)
    incident.evidence.update(mean_util=mean, at_peak=at_peak)
    root = incident.root
    what = f"uplink group {root.group}" if root.group else f"{root.device} {root.port}"
    window = f"{float(ev.get('window_s', 0)) / 60:.0f} min"
    peak = float(ev.get("peak", 0.0))
    tops = f"; at {peak:.0%} or more {at_peak:.1%} of the time: no room for bursts" if no_room else ""
    incident.summary = f"{what} runs hot: {mean:.0%} of line rate on average over {window}{tops}"


CAPACITY = IncidentKind(
    name="capacity",
    title="Link or uplink group running hot",
    colour="tab:brown",
    hint="Add capacity (links, uplinks) or move traffic: the link has no headroom for bursts.",
    describe=describe,
    finding=True,
    delay_bound_s=window_delay("capacity"),
    delay="window_s + 2 x bucket_s + 1 poll",
)

DETECTOR = Detector(
    name="capacity",
    symptoms=(SymptomKind("link_hot", "capacity", capacity_root),),
    incidents=(CAPACITY,),
    device_kinds=frozenset({"switch"}),
    make=lambda config: Capacity(config.capacity),
    config=("capacity", CapacityConfig),
    paced=True,
    records=True,
)
