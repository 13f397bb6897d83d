"""Queues that burst between two reads, often enough to cost (kind ``microbursts``).

A burst of a few milliseconds fills an egress queue into the ECN marking band and drains before
the next read: the poll's mean rate stays low, but the queue's watermark (its peak since the last
read, read-and-clear on SONiC, gNMI and the simulator) reached Kmin, or the queue ECN-marked
packets. Neither is an incast (a queue that stands, at line rate) nor a capacity problem (a mean
that stays high); both are the microbursts an All-to-All makes, which cost marks (senders slowed
by DCQCN) and, deeper, pauses. Per (port, queue) and poll, a burst is

* ECN marks counted on the queue: the burst's cost, and proof that it went past Kmin whatever
  profile the switch runs (WRED marks nothing below it). A watermark at Kmin that marked nothing
  cost nothing (found in the suite: queues standing at Kmin, their watermarks a hair past the
  configured one). On a switch that does not count marks, the watermark at or above Kmin (the
  topology's where it gives the queue's profile, else the incast detector's configured one);
* within a poll whose mean egress rate is below ``max_mean_utilisation`` of line rate (far from
  line rate: the queue filled faster than the poll can show);
* with the port not paused by its peer for ``min_pause_fraction`` of the poll (a queue held by
  pauses stands deep at a low rate: a PFC storm's, not a burst);
* and a queue that drained: below Kmin and half its watermark when read where the switch reads
  its depth; elsewhere, fewer of its packets ECN-marked than WRED marks all poll long at the
  watermark's depth.

One burst is nothing: the finding is a queue that bursts in ``min_share`` of the polls of a
sliding ``window_s`` (at least ``min_bursts`` of them), from the window's first burst. It clears
when that share or that count halves. A window read for less than ``min_coverage`` of its time,
or holding fewer than ``min_polls`` polls, is not judged: missing data is unknown, and a few polls
cannot tell often from once. The window is kept as per-``bucket_s`` sums, as the capacity
detector keeps its own; the rules live in ``schemas/bursts.py``, shared with the simulator's
labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.evidence import evidence, seen_now
from fabricwatch.detectors.incast import EcnBand, IncastConfig
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.nic_bursts import describe_nic_side
from fabricwatch.detectors.rates import CounterColumns
from fabricwatch.detectors.spec import (
    Describer,
    Detector,
    IncidentKind,
    Placement,
    Poll,
    PollStack,
    SymptomKind,
)
from fabricwatch.detectors.windows import DeviceWindows, window_delay
from fabricwatch.schemas.bursts import MicroburstConfig
from fabricwatch.schemas.messages import RootCause, Symptom

_NS = 1_000_000_000
MARKS = frozenset({"queue_ecn_marked_packets"})


@dataclass
class _Window:
    """One switch's (port, queue) cells over the window's buckets."""

    ports: tuple[str, ...]
    queues: np.ndarray
    polls: np.ndarray
    bursts: np.ndarray
    marks: np.ndarray
    """ECN-marked packets counted in burst polls (NaN-free: unknown counts nothing)."""
    peak: np.ndarray
    """Deepest watermark of a burst poll, per cell and bucket."""
    first_ns: np.ndarray
    """When the first burst poll of each cell and bucket began (NaN: none)."""
    polls_s: np.ndarray
    bucket: int
    since_ns: np.ndarray
    active: np.ndarray
    judged: dict[str, np.ndarray]
    """As of the latest bucket judged: each cell's bursts, polls, peak and marks over the window."""


@dataclass(slots=True)
class _Reading:
    """What one poll adds to its switch's current bucket, per (port, queue)."""

    queues: np.ndarray
    known: np.ndarray
    hit: np.ndarray | None = None
    """Burst and known; None: the switch marked nothing, so the poll only counts as read."""
    marks_s: np.ndarray | None = None
    """ECN-marked packets of the poll's bursts (None: the switch does not count marks)."""
    peak: np.ndarray | None = None
    first_ns: np.ndarray | None = None


class Microbursts(DeviceWindows[_Window]):
    def __init__(self, config: MicroburstConfig, incast: IncastConfig) -> None:
        super().__init__(_Window, config.window_s, config.bucket_s)
        self.config = config
        self.incast = incast

    def readings(self, stack: PollStack) -> list[_Reading | None]:
        """Per poll of the stack, what ``record`` counts of it, read in one numpy pass (None: a
        switch without queue watermarks or sent bytes, which it cannot read). A poll in which the
        switch marked nothing had no burst that cost (``MARKS``): it only counts as read."""
        watermark, queues = stack.indexed("queue_watermark_bytes")
        tx = stack.port("tx_bytes")
        if queues.size == 0 or tx is None:
            return [None] * len(stack.frames)
        marks = stack.aligned("queue_ecn_marked_packets", queues)
        tx_known = ~np.isnan(tx)[..., None]
        if marks is not None:
            known = ~np.isnan(marks) & tx_known
            marked = stack.above_zero(MARKS)
        else:
            known = ~np.isnan(watermark) & tx_known
            marked = np.ones(len(stack.frames), dtype=bool)
        hit = marks_s = peak = first = np.zeros(0)
        if marked.any():
            burst = self._bursts(stack, watermark, queues, marks, tx)
            hit = burst & known
            if marks is not None:
                marks_s = np.where(hit, np.nan_to_num(marks) * stack.dt_s[:, None, None], 0.0)
            peak = np.where(burst, watermark, np.nan)
            began = np.array([float(f.ts_ns - int(f.dt_s * _NS)) for f in stack.frames])
            first = np.where(hit, began[:, None, None], np.nan)
        return [
            _Reading(queues, known[k], hit[k], marks_s[k] if marks_s.size else None, peak[k], first[k])
            if marked[k]
            else _Reading(queues, known[k])
            for k in range(len(stack.frames))
        ]

    def record(self, poll: Poll, reading: _Reading | None = None) -> None:
        """Count the poll's bursts per queue into the current bucket, judging the window when one
        closes. ``reading``: the poll's, from ``readings`` of a batch; read here without one."""
        frame = poll.frame
        if reading is None:
            (reading,) = self.readings(PollStack.of([frame], [poll.line_Bps], poll.fabric))
            if reading is None:
                return
        w = self._window(frame.device, tuple(frame.ports), reading.queues, frame.ts_ns)
        bucket = frame.ts_ns // self._bucket_ns
        if bucket > w.bucket:
            self._judged(frame.device, self._judge(w, frame.ts_ns, frame.dt_s))
            self._advance(w, bucket)
        i = w.bucket % self._buckets
        w.polls[..., i] += reading.known
        w.polls_s[i] += frame.dt_s
        if reading.hit is None:
            return
        w.bursts[..., i] += reading.hit
        if reading.marks_s is not None:
            w.marks[..., i] += reading.marks_s
        w.peak[..., i] = np.fmax(w.peak[..., i], reading.peak)
        w.first_ns[..., i] = np.fmin(w.first_ns[..., i], reading.first_ns)

    def _bursts(
        self,
        stack: PollStack,
        watermark: np.ndarray,
        queues: np.ndarray,
        marks: np.ndarray | None,
        tx: np.ndarray,
    ) -> np.ndarray:
        """Per poll, port and queue: whether the poll had a burst."""
        occupancy = stack.aligned("queue_occupancy_bytes", queues)
        curves = [stack.fabric.ecn_curve(f.device, f.ports, queues) for f in stack.frames]
        band = EcnBand.stacked(self.incast, curves, watermark.shape)
        kmin = band.kmin
        # the cost itself where counted: WRED marks only past the switch's own Kmin
        reached = marks > 0 if marks is not None else watermark >= kmin
        low = (tx < self.config.max_mean_utilisation * stack.line_Bps)[..., None]
        burst = reached & low & ~self._held(stack, queues)
        if occupancy is not None:
            return burst & self.config.drained(occupancy, watermark, kmin)
        return burst & ~self._stood(stack, marks, queues, watermark, band)

    def _stood(
        self,
        frame: CounterColumns,
        marks: np.ndarray | None,
        queues: np.ndarray,
        watermark: np.ndarray,
        band: EcnBand,
    ) -> np.ndarray:
        """Per (port, queue), on a switch that does not read its queues' depth: whether the queue
        marked its packets all poll long as WRED marks them at its watermark's depth (at least
        ``stood_marks`` of that share). A burst marks only the packets it queued: a few
        milliseconds' worth. Found on a simulated ECMP collapse: a spine queue standing at 800 KB
        at a third of line rate read as a burst every poll."""
        sent = frame.aligned("queue_tx_packets", queues)
        if marks is None or sent is None:
            return np.zeros(watermark.shape, dtype=bool)
        at_peak = band.pmax * np.clip(band.position(watermark), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(sent > 0, marks / sent, np.nan)
        return (at_peak > 0) & (share >= self.config.stood_marks * at_peak)

    def _held(self, stack: PollStack, queues: np.ndarray) -> np.ndarray:
        """Per poll, port and queue: whether the port's peer paused that priority for
        ``min_pause_fraction`` of the poll or more (by pause frames alone where the switch does not
        count pause time): a queue held by pauses stands deep at a low rate; a storm's, not a burst."""
        frames = stack.aligned("rx_pfc_frames", queues)
        if frames is None:
            return np.zeros((*stack.values.shape[:-1], len(queues)), dtype=bool)
        duration = stack.aligned("rx_pfc_duration_us", queues)
        if duration is None:
            return frames > 0
        return (frames > 0) & ~(duration / 1e6 < self.config.min_pause_fraction * stack.dt_s[:, None, None])

    def _window(self, device: str, ports: tuple[str, ...], queues: np.ndarray, ts_ns: int) -> _Window:
        w = self._devices.get(device)
        if w is not None and w.ports == ports and np.array_equal(w.queues, queues):
            return w
        shape, b = (len(ports), len(queues)), self._buckets
        w = self._devices[device] = _Window(
            ports=ports,
            queues=queues.copy(),
            polls=np.zeros((*shape, b), dtype=np.int64),
            bursts=np.zeros((*shape, b), dtype=np.int64),
            marks=np.zeros((*shape, b)),
            peak=np.full((*shape, b), np.nan),
            first_ns=np.full((*shape, b), np.nan),
            polls_s=np.zeros(b),
            bucket=ts_ns // self._bucket_ns,
            since_ns=np.zeros(shape, dtype=np.int64),
            active=np.zeros(shape, dtype=bool),
            judged={},
        )
        return w

    def _judge(self, w: _Window, ts_ns: int, dt_s: float) -> np.ndarray:
        """The window as of a bucket's close: cells that start bursting often and cells that clear."""
        c = self.config
        if w.polls_s.sum() < c.min_coverage * c.window_s:
            return np.zeros(w.active.shape, dtype=bool)  # too little read: unknown, nothing changes
        polls, bursts = w.polls.sum(axis=-1), w.bursts.sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = bursts / polls
            peak = np.fmax.reduce(w.peak, axis=-1)
            first = np.fmin.reduce(w.first_ns, axis=-1)
        judged = c.judged(polls, dt_s)
        often, rare = judged & c.often(bursts, share), judged & c.rare(bursts, share)
        starts = often & ~w.active
        w.since_ns[starts] = first[starts]  # the window's first burst: often implies one
        cleared = w.active & rare
        w.active = (w.active | often) & ~rare
        w.judged = {"bursts": bursts, "polls": polls, "peak": peak, "marks": w.marks.sum(axis=-1)}
        return cleared

    def _advance(self, w: _Window, bucket: int) -> None:
        for b in range(w.bucket + 1, min(bucket, w.bucket + self._buckets) + 1):
            i = b % self._buckets
            w.polls[..., i], w.bursts[..., i], w.marks[..., i], w.polls_s[i] = 0, 0, 0.0, 0.0
            w.peak[..., i] = w.first_ns[..., i] = np.nan
        w.bucket = bucket

    def _symptoms(self, device: str, ts_ns: int, w: _Window, cleared: np.ndarray) -> list[Symptom]:
        c = self.config

        def one(p: int, q: int, on: bool) -> Symptom:
            j = w.judged
            found = evidence(
                bursts=int(j["bursts"][p, q]),
                polls=int(j["polls"][p, q]),
                peak_watermark_bytes=float(j["peak"][p, q]),
                marked_packets=float(j["marks"][p, q]),
                window_s=c.window_s,
            )
            return Symptom(
                "microburst",
                device,
                ts_ns,
                int(w.since_ns[p, q]),
                on,
                w.ports[p],
                int(w.queues[q]),
                evidence=found,
            )

        return [one(p, q, True) for p, q in np.argwhere(w.active)] + [
            one(p, q, False) for p, q in np.argwhere(cleared)
        ]


def microburst_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause:
    return RootCause(sym.device, sym.port, priority=sym.priority)


BURSTY_OPS = ("AllToAll", "AllToAllv", "SendRecv")
"""The collectives that burst into one port: an All-to-All's exchange is the usual cause."""


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = seen_now(incident, [s for s in group.members if s.kind == "microburst"])
    if not own:
        describe_nic_side(d, incident, group)
        return
    latest = max(own, key=lambda s: s.ts_ns)
    ev = latest.evidence
    bursts, polls = int(ev.get("bursts", 0)), int(ev.get("polls", 0))
    peak, marks = float(ev.get("peak_watermark_bytes", 0.0)), float(ev.get("marked_packets", 0.0))
    root = incident.root
    incident.severity = "info"
    incident.devices.add(root.device)
    # Over the finding's life, growing only: its resolution still says how deep and how often.
    peak = max(peak, float(incident.evidence.get("peak_watermark_bytes", 0.0)))
    most = max(bursts / polls if polls else 0.0, float(incident.evidence.get("most_bursting", 0.0)))
    incident.evidence.update(
        bursts=bursts, polls=polls, peak_watermark_bytes=peak, most_bursting=most, marked_packets=marks
    )
    receiver = d.fabric.host_behind(root.device, root.port)
    if receiver:
        incident.hosts.add(receiver)
    d.jobs.attach(incident, {receiver} if receiver else set(), incident.start_ns, BURSTY_OPS)
    window = f"{float(ev.get('window_s', 0)):.0f} s"
    job = f"; job {', '.join(incident.jobs)} {', '.join(incident.collectives)}" if incident.jobs else ""
    cost = f", {marks:.0f} packets ECN-marked" if marks > 0 else ""
    incident.summary = (
        f"Microbursts on {root.device} {root.port} queue {root.priority}"
        f"{f' (host {receiver})' if receiver else ''}: {bursts} of its last {polls} polls (at most "
        f"{window}) peaked in the marking band, up to {peak / 1e3:.0f} KB, at a low mean rate{cost}{job}"
    )


MICROBURSTS = IncidentKind(
    name="microbursts",
    title="Microbursts",
    colour="tab:pink",
    hint=(
        "A queue fills between two reads: look at the job's All-to-All (NCCL_ALGO, PXN, its "
        "message sizes) and the queue's ECN thresholds and buffer share."
    ),
    describe=describe,
    carried=("peak_watermark_bytes", "most_bursting"),
    finding=True,
    delay_bound_s=window_delay("microbursts"),
    delay="window_s + 2 x bucket_s + 1 poll",
)

DETECTOR = Detector(
    name="microbursts",
    symptoms=(SymptomKind("microburst", "microbursts", microburst_root),),
    incidents=(MICROBURSTS,),
    device_kinds=frozenset({"switch"}),
    make=lambda config: Microbursts(config.microbursts, config.incast),
    config=("microbursts", MicroburstConfig),
    paced=True,
    records=True,
)
