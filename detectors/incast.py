"""Incast, per switch: an egress queue congested past the ECN threshold by several senders at once.

Evidence on one switch, all from one snapshot's rates: the queue is deep in the ECN marking band
(see detectors/config.py for why depth means fan-in), the queue keeps ECN-marking, it is still
above Kmin when read or marks ``line_rate_marks`` of its packets while its port is busy (it did not
drain: the congestion stands; one depth reading a poll is what DCQCN makes unreliable, the marks
are steadier; without an occupancy counter, the port running near line rate stands in), and, when
it is reported, at least ``min_fan_in`` other ports feed it: their received traffic rose by a real
share since the switch was last quiet (``IncastDetector._fan_in``; not asked of the poll in which it
began: a few milliseconds of incast at the end of an interval barely move the ingress averages).
A burst the buffer absorbs shows the watermark for one poll; an incast persists, so it must hold
for ``sustain_polls`` polls unless it already hurts (drops on that queue, or the switch pausing its
own ingress ports) or one poll already shows it lasting the whole interval (line rate throughout,
the queue deep at its peak and still deep when read).

How deep a queue sits in its band is read two ways, and the deeper reading counts: its watermark
against the band's thresholds, and the share of its packets ECN-marked against the share WRED marks
at the top of the band. The thresholds are the switch's own where the topology carries its queue
profile (a site file, or the WRED profile a SONiC switch publishes in its config DB), else the
configured ones. The marked share needs no thresholds at all: WRED marks in proportion to the depth
within the band, so the switch's marking says where its queue stood on whatever profile it runs.
A shallow-buffer fabric (Kmin 50 KiB, Kmax 400 KiB) never brings a queue to the middle of the
default 150 KB-1.5 MB band, but its incasts mark half their packets and more. A third reading needs
neither the band nor ``pmax``: a port at line rate all poll whose queue marks ``line_rate_marks`` of
its packets stood in its band, as a milder incast DCQCN holds inside a shallow band does
(``IncastConfig.line_rate_marks``). Each symptom says
which profile it used (``ecn_profile``: topology or config) and which reading made it deep
(``deep_by``: depth, marks or line_rate_marks).

Only host-facing ports can be incast victims: many-to-one traffic converges on the last hop to the
receiver, which carries all of it. Congestion on a fabric link is either ECMP imbalance (the ECMP
detector's business) or oversubscription under balanced load, and neither is an incast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import capped, cell_symptom, evidence
from fabricwatch.detectors.fabric import EcnCurve
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.jobs import MANY_TO_ONE
from fabricwatch.detectors.persistence import LACK_OF_DATA_S, StreakTable
from fabricwatch.detectors.rates import CounterColumns, RateFrame
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Poll, PollStack, SymptomKind
from fabricwatch.schemas.config import AtLeastOne, Fraction, Positive
from fabricwatch.schemas.messages import Phase, Symptom, check_ecn_curve


class IncastConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    lack_of_data_s: Positive = LACK_OF_DATA_S
    ecn_kmin_bytes: Positive = 150_000.0
    ecn_kmax_bytes: Positive = 1_500_000.0
    band_fraction: Fraction = 0.5
    hold_band_fraction: Fraction = 0.25
    min_egress_utilisation: Fraction = 0.7
    full_poll_utilisation: Fraction = 0.9
    min_fan_in: AtLeastOne = 2
    fan_in_port_fraction: Fraction = 0.05
    sustain_polls: AtLeastOne = 2
    ecn_pmax: Fraction = 0.2
    """WRED's marking probability at Kmax. Where a switch has no queue-depth gauge, a poll in which
    the port ran at line rate with its watermark deep and at least ``band_fraction * ecn_pmax *
    standing_marks`` of the queue's packets marked had its queue deep the whole poll: marks are the
    gauge-less switch's proof that the queue stood rather than peaked once."""
    standing_marks: Fraction = 0.8
    """Share of the marking a queue standing at the deep point would cause, allowing for noise."""
    line_rate_marks: Fraction = 0.03
    """Share of its packets a queue must mark in a poll its port ran at ``full_poll_utilisation``
    or more to count as standing in its band, deep or not, whatever its thresholds and its one depth
    reading say. Arrivals above the port's rate all poll keep a queue (one sender at line rate builds
    none), and DCQCN holds it inside a shallow band: on 100G with WRED 50-400 KiB at pmax 0.1, three
    senders at 60 % mark 7 % of the packets, which puts the queue below the middle of any band read
    with the default ``ecn_pmax`` (found, issue 33 item 4); its depth, read once a poll, falls below
    Kmin in a third of the polls (item 7c). A busy link DCQCN holds near Kmin marks a fraction of
    a percent. In the poll it began, the port busy for only part of it, a queue still above Kmin
    when read counts as well (so the incast is found in ``sustain_polls``); the next poll must run
    at line rate for it to go on."""
    min_pause_fraction: Fraction = 0.01
    """Share of the poll for which the switch must have paused other ports on the congested queue's
    priority for the congestion to count as spreading (firing at once, critical). Pauses of a few
    microseconds are a buffer's XOFF/XON breathing; found (issue 33, 7): 1 to 17 us of pause on a
    spine port made 14 of 16 false incasts fire at once."""

    def __post_init__(self) -> None:
        check_ecn_curve(self.ecn_kmin_bytes, self.ecn_kmax_bytes, self.ecn_pmax)
        if self.hold_band_fraction > self.band_fraction:
            raise ValueError(
                "hold_band_fraction must not be above band_fraction (it is the lower, hold level)"
            )


class IncastDetector:
    SIGNALS = frozenset({"queue_ecn_marked_packets"})
    """A switch that counts ECN marks and marked none this poll has no queue that can start an
    incast (a deep queue must also mark); one without the counter is judged by depth alone."""

    def __init__(self, config: IncastConfig) -> None:
        self.config = config
        self._streaks = StreakTable()
        self._quiet: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        """Per switch, each port's received and sent rates in its last poll with no queue congested."""
        self._began: dict[str, np.ndarray] = {}
        """Per switch, the queues whose streak began last poll on a partial poll's marks alone."""

    def open(self, device: str) -> bool:
        return self._streaks.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        """The switch's ECN thresholds per (port, queue) are the topology's where it knows them."""
        frame, line_Bps = poll.frame, poll.line_Bps
        if self._unmarked(frame) and not self._streaks.open(frame.device):
            rx, tx = frame.port("rx_bytes"), frame.port("tx_bytes")
            if rx is not None and tx is not None:
                self._keep_quiet(frame, rx, tx)
            return []  # nothing marked and nothing open: the poll would change nothing
        watermark, queues = frame.indexed("queue_watermark_bytes")
        if queues.size == 0:
            return []
        cfg = self.config
        drops = frame.aligned("queue_drops", queues)
        tx = frame.port("tx_bytes")
        rx = frame.port("rx_bytes")
        band = EcnBand.of(cfg, poll.fabric.ecn_curve(frame.device, frame.ports, queues), watermark.shape)
        read = _Queues.read(cfg, frame, line_Bps, band)
        ecn, occupancy = read.ecn, read.occupancy
        by_depth, by_marks, position = read.by_depth, read.by_marks, read.position
        streak = self._streaks.get(frame.device, watermark.shape)
        # the poll it began in: busy for part of it, still standing
        beginning = read.could_begin & (streak.polls == 0) & ~streak.active
        held = (position >= cfg.hold_band_fraction) & ((streak.polls > 0) | streak.active)
        began = self._began.pop(frame.device, None)
        if began is not None and began.shape == held.shape:
            held &= ~began  # a start in a partial poll goes on only at line rate or deep
        fan_in, by_rise = self._fan_in(frame.device, rx, tx, cfg.fan_in_port_fraction * line_Bps)
        congested = read.congested(beginning, held, poll.fabric.host_facing(frame.device, frame.ports))
        fed = (fan_in >= cfg.min_fan_in)[:, None]

        # A queue whose depth and marks are both unknown, or whose standing cannot be read, is
        # neither congested nor clear in this poll (a port between two refreshes of its counters).
        standing_known = ~np.isnan(occupancy) if occupancy is not None else ~np.isnan(tx)[:, None]
        known = ~np.isnan(position) & standing_known
        streak.step(congested, frame.ts_ns, frame.dt_s, known=known)
        only_beginning = congested & beginning & (position < cfg.band_fraction)
        if only_beginning.any():
            self._began[frame.device] = only_beginning
        pausing = self._pausing_ingress(frame, queues, cfg.min_pause_fraction)
        hurting = pausing if drops is None else (drops > 0) | pausing
        whole_poll = self._congested_throughout(occupancy, by_depth, by_marks, band, tx, line_Bps)
        streak.start(fed & ((streak.polls >= cfg.sustain_polls) | (congested & (hurting | whole_poll))))
        cleared = streak.stop(~congested & known)
        ended = streak.lapse(frame.ts_ns, cfg.lack_of_data_s)
        if not self._streaks.open(frame.device):
            self._keep_quiet(frame, rx, tx)

        def proof(p: int, q: int) -> dict[str, float | int | str]:
            return evidence(
                queue_watermark_bytes=watermark[p, q],
                ecn_marked_pps=ecn[p, q] if ecn is not None else math.nan,
                egress_utilisation=tx[p] / line_Bps[p],
                fan_in_ports=int(fan_in[p]),
                fan_in_by="rise" if by_rise[p] else "level",
                drops_pps=drops[p, q] if drops is not None else math.nan,
                pausing_ingress=int(pausing[p, q]),
                ecn_kmin_bytes=band.kmin[p, q],
                ecn_kmax_bytes=band.kmax[p, q],
                ecn_profile="topology" if band.from_topology[p, q] else "config",
                deep_by=_deep_by(by_depth[p, q], by_marks[p, q], cfg.band_fraction),
            )

        return streak.report(
            cleared,
            lambda i, active: cell_symptom(
                "incast", frame, congested.shape, i, queues, streak.since_ns, active, proof
            ),
            known,
            frame.ts_ns,
            ended,
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll: nothing marked, or no queue congested as in a streak's first poll
        (``update``'s reading with no streak open, the only case a screen is asked)."""
        watermark, queues = stack.indexed("queue_watermark_bytes")
        if queues.size == 0:
            return np.ones(len(stack.frames), dtype=bool)
        marked = self._marked_each(stack)
        if not marked.any():
            return ~marked
        if stack.port("rx_bytes") is None or stack.port("tx_bytes") is None:
            return ~marked  # ``update`` judges the others, and says what is wrong with them
        marked[marked] = self._could_stand(stack.only(marked), queues)
        passed = ~marked
        if not marked.any():
            return passed
        stack = stack.only(marked)
        curves = [stack.fabric.ecn_curve(f.device, f.ports, queues) for f in stack.frames]
        shape = (len(stack.frames), *watermark.shape[1:])
        read = _Queues.read(self.config, stack, stack.line_Bps, EcnBand.stacked(self.config, curves, shape))
        congested = read.congested(read.could_begin, np.zeros(shape, dtype=bool), stack.host_facing())
        passed[marked] = ~congested.any(axis=(1, 2))
        return passed

    def _could_stand(self, stack: PollStack, queues: np.ndarray) -> np.ndarray:
        """Per poll: some queue of a host-facing port marking and standing by the loosest test
        (its depth past the lowest Kmin of any profile, or its port busy). Cheaper than the whole
        reading, and true of every poll that reading could find congested: a DCQCN fabric's
        switches mark at shallow depth all day."""
        cfg = self.config
        could = (stack.port("tx_bytes") >= cfg.min_egress_utilisation * stack.line_Bps)[..., None]
        occupancy = stack.aligned("queue_occupancy_bytes", queues)
        if occupancy is not None:
            curves = [stack.fabric.ecn_curve(f.device, f.ports, queues) for f in stack.frames]
            lowest = min(
                [cfg.ecn_kmin_bytes] + [np.nanmin(c.kmin, initial=np.inf) for c in curves if c is not None]
            )
            could = could | (occupancy >= lowest)
        ecn = stack.aligned("queue_ecn_marked_packets", queues)
        if ecn is not None:
            could = could & (ecn > 0)
        return (could & stack.host_facing()[..., None]).any(axis=(1, 2))

    def pass_over(self, poll: Poll) -> None:
        """The switch's rates, kept as its last quiet ones, as ``update`` keeps them."""
        frame = poll.frame
        rx, tx = frame.port("rx_bytes"), frame.port("tx_bytes")
        if rx is None or tx is None:
            return
        if not self._unmarked(frame):
            if frame.layout.indexed("queue_watermark_bytes")[1].size == 0:
                return
            self._began.pop(frame.device, None)
        self._keep_quiet(frame, rx, tx)

    def _unmarked(self, frame: RateFrame) -> bool:
        """The switch counts ECN marks and marked none this poll."""
        return bool(frame.layout.columns_of(self.SIGNALS).size) and not frame.any_above_zero(self.SIGNALS)

    def _marked_each(self, stack: PollStack) -> np.ndarray:
        """Per poll, not ``_unmarked``: marks counted, or no mark counter to tell."""
        if not stack.layout.columns_of(self.SIGNALS).size:
            return np.ones(len(stack.frames), dtype=bool)
        return stack.above_zero(self.SIGNALS)

    def _keep_quiet(self, frame: RateFrame, rx: np.ndarray, tx: np.ndarray) -> None:
        """A poll with no queue of the switch congested: what its ports carry when no incast runs."""
        self._quiet[frame.device] = (rx.copy(), tx.copy())

    def _fan_in(
        self, device: str, rx: np.ndarray, tx: np.ndarray, bar: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per port as a victim, how many other ports feed it, and whether that was read by the
        ports' rise (``rise``) or their level (``level``).

        Counting every port that receives ``bar`` made any background load a fan-in: found (issue
        33, 7a), every incast, true or false, had 8-9 feeders of 10 ports; one fed by exactly three
        said 9. So a feeder is a port whose received rate rose by ``bar`` or more since the
        switch's last poll with no queue congested, where those rises explain at least half of the
        victim's own rise: a hot spot fed by one port (a fabric link carrying a collapsed group's
        traffic into a slower host port) has one feeder, however busy the switch. Where they do
        not (senders already busy that turned toward the victim: its traffic rose, theirs did not),
        or the switch was not yet seen quiet, or a port's rate then is unknown, the level counts."""
        level = rx >= bar
        level_in = level.sum() - level
        quiet = self._quiet.get(device)
        if quiet is None or quiet[0].shape != rx.shape:
            return level_in, np.zeros(rx.shape, dtype=bool)
        rx_before, tx_before = quiet
        rise = rx - rx_before
        rose = np.where(np.isnan(rise), level, rise >= bar)
        brought = np.where(rose & ~np.isnan(rise), rise, 0.0)
        by_rise = brought.sum() - brought >= 0.5 * (tx - tx_before)
        return np.where(by_rise, rose.sum() - rose, level_in), by_rise

    def _congested_throughout(
        self,
        occupancy: np.ndarray | None,
        by_depth: np.ndarray,
        by_marks: np.ndarray,
        band: EcnBand,
        tx: np.ndarray,
        line_Bps: np.ndarray,
    ) -> np.ndarray:
        """A port at line rate for the whole poll whose queue is deep both at its peak and when read
        was congested all along: that is already sustained, one poll is enough. A poll's marks
        prove both without a depth gauge or a known band: a queue that only peaked once marks few
        packets, one that stood deep all poll marks them at WRED's share for that depth."""
        cfg = self.config
        saturated = (tx >= cfg.full_poll_utilisation * line_Bps)[:, None]
        stood = by_marks >= cfg.band_fraction
        if occupancy is None:
            return saturated & stood
        deep_when_read = (band.position(occupancy) >= cfg.band_fraction) | (stood & (occupancy >= band.kmin))
        return saturated & deep_when_read & ((by_depth >= cfg.band_fraction) | stood)

    @staticmethod
    def _pausing_ingress(frame: RateFrame, queues: np.ndarray, min_fraction: float) -> np.ndarray:
        """Per (port, queue): whether the switch paused its other ports on that queue's priority
        for at least ``min_fraction`` of the poll (by pause frames alone where it does not count
        pause time): the queue's congestion spreading upstream, not any pause anywhere."""
        frames = frame.aligned("tx_pfc_frames", queues)
        shape = (len(frame.ports), len(queues))
        if frames is None:
            return np.zeros(shape, dtype=bool)
        paused = frames > 0
        duration = frame.aligned("tx_pfc_duration_us", queues)
        if duration is not None:
            paused &= ~(duration / 1e6 < min_fraction * frame.dt_s)  # unknown time: by frames
        return paused.sum(axis=0)[None, :] - paused > 0  # the other ports: not the victim itself


def _deep_by(by_depth: float, by_marks: float, band_fraction: float) -> str:
    """Which reading made the queue deep: its depth, its marks' place in the band, or (neither
    past the middle) marks at line rate all poll."""
    if np.fmax(by_depth, by_marks) < band_fraction:
        return "line_rate_marks"
    return "marks" if by_marks > by_depth else "depth"


@dataclass(frozen=True)
class EcnBand:
    """The ECN marking band of each (port, queue) cell: the topology's where it has one, else the
    configured one."""

    kmin: np.ndarray
    kmax: np.ndarray
    pmax: np.ndarray
    from_topology: np.ndarray

    @classmethod
    def of(cls, cfg: IncastConfig, curve: EcnCurve | None, shape: tuple[int, ...]) -> EcnBand:
        if curve is None:
            return cls(
                np.full(shape, cfg.ecn_kmin_bytes),
                np.full(shape, cfg.ecn_kmax_bytes),
                np.full(shape, cfg.ecn_pmax),
                np.zeros(shape, dtype=bool),
            )
        known = ~np.isnan(curve.kmin)
        return cls(
            np.where(known, curve.kmin, cfg.ecn_kmin_bytes),
            np.where(known, curve.kmax, cfg.ecn_kmax_bytes),
            np.where(np.isnan(curve.pmax), cfg.ecn_pmax, curve.pmax),
            known,
        )

    @classmethod
    def stacked(cls, cfg: IncastConfig, curves: list[EcnCurve | None], shape: tuple[int, ...]) -> EcnBand:
        """The bands of a stack of polls (``shape``: polls x ports x queues), one curve a poll."""
        if all(curve is None for curve in curves):
            return cls.of(cfg, None, shape)
        bands = [cls.of(cfg, curve, shape[1:]) for curve in curves]
        return cls(
            *(np.stack([getattr(b, f) for b in bands]) for f in ("kmin", "kmax", "pmax", "from_topology"))
        )

    def position(self, depth: np.ndarray) -> np.ndarray:
        """0 at Kmin, 1 at Kmax."""
        return (depth - self.kmin) / (self.kmax - self.kmin)


@dataclass(frozen=True)
class _Queues:
    """What a poll (or a stack of polls: a leading axis) shows of each (port, queue) before its
    streak is asked: ``update`` and ``screen`` read a queue the same way."""

    cfg: IncastConfig
    ecn: np.ndarray | None
    occupancy: np.ndarray | None
    by_depth: np.ndarray
    by_marks: np.ndarray
    position: np.ndarray
    marks_standing: np.ndarray
    saturated: np.ndarray
    standing: np.ndarray
    could_begin: np.ndarray
    """Still standing when read with its marks at line rate's share: a streak's first poll, the
    port busy for only part of it (never without a depth gauge)."""

    @classmethod
    def read(
        cls, cfg: IncastConfig, counters: CounterColumns, line_Bps: np.ndarray, band: EcnBand
    ) -> _Queues:
        watermark, queues = counters.indexed("queue_watermark_bytes")
        ecn = counters.aligned("queue_ecn_marked_packets", queues)
        occupancy = counters.aligned("queue_occupancy_bytes", queues)
        tx = counters.port("tx_bytes")
        by_depth = band.position(watermark)
        share = _marked_share(counters, ecn, queues, watermark.shape)
        by_marks = share / (band.pmax * cfg.standing_marks)
        marks_standing = share >= cfg.line_rate_marks
        busy = (tx >= cfg.min_egress_utilisation * line_Bps)[..., None]
        if occupancy is None:
            standing, could_begin = busy, np.zeros(watermark.shape, dtype=bool)
        else:
            above_kmin = occupancy >= band.kmin
            standing, could_begin = above_kmin | (busy & marks_standing), marks_standing & above_kmin
        return cls(
            cfg,
            ecn,
            occupancy,
            by_depth,
            by_marks,
            np.fmax(by_depth, by_marks),
            marks_standing,
            (tx >= cfg.full_poll_utilisation * line_Bps)[..., None],
            standing,
            could_begin,
        )

    def congested(self, beginning: np.ndarray, held: np.ndarray, host_facing: np.ndarray) -> np.ndarray:
        """Deep in its band (or standing at line rate, or ``beginning``), or ``held`` above the
        hold level; marking where the switch counts marks; standing; on a host-facing port."""
        stood_at_line_rate = (self.saturated & self.marks_standing) | beginning
        deep = (self.position >= self.cfg.band_fraction) | stood_at_line_rate
        marking = deep | held if self.ecn is None else (deep | held) & (self.ecn > 0)
        return marking & self.standing & host_facing[..., None]


def _marked_share(
    counters: CounterColumns, ecn: np.ndarray | None, queues: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """The share of each queue's packets marked in the poll: WRED marks ``pmax`` of them at the
    top of the band, so divided by it this says where the queue stood; NaN where the switch
    counts no marked or no sent packets."""
    sent = counters.aligned("queue_tx_packets", queues)
    if ecn is None or sent is None:
        return np.full(shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sent > 0, ecn / sent, np.nan)


# Stage 2: an incast is into a host (every rail's leaf port of it at once is one incident),
# named by the job and collective sending, and by its ranks where the communication graph says.

DELAY_POLLS = 2.0
"""Found within this many polls of its start (``sustain_polls``)."""


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    root, fabric = incident.root, d.fabric
    receiver = fabric.host_behind(root.device, root.port)
    if receiver:
        incident.hosts.add(receiver)
        nic = fabric.nic_behind(root.device, root.port)
        if nic and any(k[0] == "ecn_received" and k[1] == nic for k in active):
            incident.evidence["receiver_nic_ecn_cnp"] = "rising"
    hurting = float(latest.evidence.get("drops_pps", 0)) > 0 or latest.evidence.get("pausing_ingress") == 1
    if hurting:
        incident.severity = "critical"  # and stays: see ecmp.describe
    to = {receiver} if receiver else set()
    matched = d.jobs.attach(incident, to, incident.start_ns, MANY_TO_ONE)
    ranks = _sending_ranks(d, matched, receiver)
    senders = sorted(incident.hosts - {receiver})
    if senders:
        incident.evidence["senders"] = len(senders)
        incident.evidence["sender_hosts"] = capped(senders)
        throttled = {fabric.host_of(k[1]) for k in active if k[0] == "cnp_received"}
        incident.evidence["senders_receiving_cnp"] = len(throttled & set(senders))
    job = f"; job {', '.join(incident.jobs)} {', '.join(incident.collectives)}" if incident.jobs else ""
    if ranks:
        incident.evidence["sending_ranks"] = ranks
        job += f" from ranks {ranks}"
    # The peak over the incident's life, not the latest poll's: one figure, growing only, so the
    # firing line, the updates, the stored event and the report never disagree about it.
    peak = max(
        float(incident.evidence.get("peak_queue_bytes", 0)),
        float(latest.evidence.get("queue_watermark_bytes", 0)),
    )
    incident.evidence["peak_queue_bytes"] = peak
    incident.summary = (
        f"Incast into {root.device} {root.port} queue {root.priority}"
        f"{f' (host {receiver})' if receiver else ''}: peak queue {peak / 1e3:.0f} KB, "
        f"{latest.evidence.get('fan_in_ports', '?')} ingress ports{job}"
    )


def _sending_ranks(d: Describer, matched: list[Phase], receiver: str | None) -> str:
    """The ranks of the likeliest collective whose connections lead into the receiver, from its
    communication graph (``""`` without one): who is sending, not only which job."""
    for ph in matched[:1]:
        ranks = d.jobs.senders_into(ph.job, ph.comm, {receiver} if receiver else set())
        if ranks:
            return capped([str(r) for r in ranks], 16)
    return ""


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    return DELAY_POLLS * poll_s


INCAST = IncidentKind(
    name="incast",
    title="Incast",
    colour="tab:orange",
    hint=(
        "Many-to-one traffic into one port: check the job's collective algorithm (NCCL_ALGO, PXN), "
        "spread receivers, and DCQCN ECN thresholds / buffer headroom on that queue."
    ),
    describe=describe,
    delay_bound_s=_delay_bound_s,
    delay=f"{DELAY_POLLS:g} polls",
    carried=("peak_queue_bytes",),
    reported_root=lambda placement, group: placement.roots.first_rail(group),
)
DETECTOR = Detector(
    name="incast",
    symptoms=(
        SymptomKind("incast", "incast", lambda placement, key, sym: placement.roots.incast_identity(sym)),
    ),
    incidents=(INCAST,),
    device_kinds=frozenset({"switch"}),
    make=lambda config: IncastDetector(config.incast),
    config=("incast", IncastConfig),
)
