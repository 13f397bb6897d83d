"""A job's rhythm read from the fabric alone: a period that stretches, or traffic that stops (kind
``rhythm``).

A training job's traffic repeats with its step: the same collectives, every step, through every
NIC of its hosts. Per NIC, over a sliding ``window_s`` of its byte rates (sent and received), the
period is the autocorrelation's (``rhythm.py``), judged every ``every_s``. A NIC whose period held
within ``agree`` of itself for ``learn`` judgments in a row, at ``min_strength`` or more and
``min_period_polls`` polls long at least, has a **usual period** (and a usual rate: the
window's mean). Then

* **stretched**: for ``confirm`` judgments in a row, the period reads ``stretch`` or more above
  the usual one, and

  - the traffic no longer repeats at the usual period (its autocorrelation there below ``SHARE``
    of the new period's: a period read at a multiple of the usual one is the same rhythm);
  - the new period is not a whole multiple of the usual one (the usual rhythm with another
    beside it: found in the suite, an All-to-All's 9 s beat and a 2 s burst train on one NIC
    repeating together every 18 s; a job that slows exactly twofold is missed);
  - the window's newest half reads the same period (a window that still mixes the old steps
    and the new reads a period of neither).

  The steps take longer: a slowdown seen without a log or a profiler. It clears when the period
  is back within ``agree`` of the usual one;
* **stopped**: the NIC carried less than ``stop_share`` of its usual rate over the last
  ``stop_s``: the job hangs or crashed. It clears when the traffic is back (half the usual rate).

While neither holds, the usual period follows the period slowly, so that a job that speeds up
or slows down a little over hours is not a finding; a NIC whose traffic reads another period,
neither the usual one nor a stretch of it, for twice ``learn`` judgments learns its rhythm
again (another job, another mix). A window read for less than ``min_coverage``
of its time, or holding fewer than ``min_polls`` polls, is not judged (missing data is unknown,
and a few polls hold no period), and a judgment without a period changes nothing.

Stage 2 roots a NIC's finding at the job whose phase on its host ran through the window before
the change, in which the rhythm was whole: every NIC of a job that slows is one finding. It says
nothing

* without such a job: from the fabric alone a job that ended stops the same way, and a host's
  rhythm changes with the mix of jobs on it (found on the real leaves, which name no job: a port
  whose 6 s rhythm read 16 s for minutes, and ports whose traffic stopped);
* when another job's phase began on the host since: its mix of traffic changed, not its pace
  (found in the suite: a sender of a second All-to-All's bursts); or a phase begun since is
  another activity's (a job between two phases, one of its bursts running, its NICs silent);
* on a host or device an open incident holds, or held in the last minute (found in the suite: a
  PFC storm stops the AllReduce ring through its root, every host of the ring stops; the storm
  is paged, naming the job).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import evidence, seen_now
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.paced import Pacer
from fabricwatch.detectors.rhythm import (
    SHARE,
    correlation_at,
    match_at,
    period_of,
    series_autocorrelation,
)
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, Poll, SymptomKind
from fabricwatch.detectors.windows import pack, unpack
from fabricwatch.schemas.config import AtLeastOne, Fraction, Positive
from fabricwatch.schemas.messages import RootCause, Symptom
from fabricwatch.schemas.periods import Periods, known

_NS = 1_000_000_000
PERIODS_KEPT = 100_000
"""Judgments kept for the store between two takes: a minute of 50,000 NICs judged every 30 s.
Past it the oldest go (the store misses a point of a series, nothing else)."""
PERIODS_PER_MESSAGE = 4096
"""NICs in one ``Periods`` message: some 400 KB of JSON."""


class RhythmConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    window_s: Positive = 180.0
    """The span a period is read over: several steps of the slowest job watched."""
    every_s: Positive = 30.0
    """Seconds between two judgments of a NIC: a rhythm that holds costs two dot products then,
    one that changed a spectrum (``bench/bench_rates.py``, ``stage1_nic_rhythm_*``)."""
    min_polls: AtLeastOne = 36
    """Polls a window must hold: a third of them is the longest period it can read."""
    min_coverage: Fraction = 0.6
    learn: AtLeastOne = 3
    min_period_polls: AtLeastOne = 4
    """Polls the usual period must span. A period of two or three polls is as likely an alias of a
    faster rhythm, which a small change moves far (found on the real leaves: ports of three leaves
    read 2.0 s, then 3.0 s, at once)."""
    min_strength: Fraction = 0.5
    """Autocorrelation a period must reach to be learned or to be a stretch: a weaker one is a
    rhythm the traffic of other jobs and faults blurs (found in the suite: a NIC of an All-to-All
    job at 0.4 read 1.9 s, then 3.0 s while an incast ran beside it)."""
    agree: Fraction = 0.08
    """How close two periods are the same period (a share of the usual one)."""
    stretch: Fraction = 0.2
    """How much longer a period must read to be a stretch: more than a poll's jitter can make."""
    confirm: AtLeastOne = 2
    idle_every_s: Positive = 300.0
    """At most this long between two judgments of a NIC whose traffic shows no rhythm (each one
    without doubles the wait): steady traffic costs a spectrum every few minutes, not every check."""
    stop_s: Positive = 30.0
    """How long a NIC must carry almost nothing to have stopped: longer than a checkpoint's pause."""
    stop_share: Fraction = 0.05
    follow: Fraction = 0.1
    """The weight a judged period has in the usual one while it agrees with it."""


@dataclass
class _Nic:
    """One NIC's recent rates (a ring) and what its rhythm has been."""

    ts: np.ndarray
    rate: np.ndarray
    at: int = 0
    usual_s: float = float("nan")
    usual_rate: float = float("nan")
    learning: int = 0
    candidate_s: float = float("nan")
    longer: int = 0
    other: int = 0
    """Judgments in a row that read another period, neither the usual one nor a stretch."""
    period_s: float = float("nan")
    strength: float = float("nan")
    stretched_since: int = 0
    stopped_since: int = 0
    quiet_until: int = 0
    """Before this, a NIC whose traffic showed no rhythm is not judged again."""
    misses: int = 0


class TrafficRhythm(Pacer):
    """A paced detector (``spec.Detector.paced``) that records every poll (``spec.Recorder``): the
    calm-poll skip of NIC polls stays, and a NIC's bytes are noted at a lookup and a write."""

    def __init__(self, config: RhythmConfig) -> None:
        super().__init__(config.every_s)
        self.config = config
        self._nics: dict[str, _Nic] = {}
        self._periods: deque[tuple[str, int, float, float, float, float]] = deque(maxlen=PERIODS_KEPT)
        """The judgments that read a period, until stage 1 takes them (``take_periods``)."""

    def open(self, device: str) -> bool:
        nic = self._nics.get(device)
        return bool(nic and (nic.stretched_since or nic.stopped_since))

    def window_state(self, device: str) -> bytes | None:
        """The NIC's recent rates and usual rhythm (``windows.WindowedDetector``): the worker that
        reads it next carries on rather than learning its period again."""
        nic = self._nics.get(device)
        return None if nic is None else pack(nic, window_s=self.config.window_s)

    def restore_window(self, device: str, state: bytes) -> None:
        self._nics[device] = unpack(_Nic, state, window_s=self.config.window_s)

    def drop_window(self, device: str) -> None:
        self._nics.pop(device, None)

    def take_periods(self) -> list[Periods]:
        """The periods judged since the last call, for the store (``fabric.rhythm``), in messages
        of at most ``PERIODS_PER_MESSAGE`` NICs (a broker's message limit is a megabyte)."""
        taken = list(self._periods)
        self._periods.clear()
        out = []
        for at in range(0, len(taken), PERIODS_PER_MESSAGE):
            devices, ts_ns, period, strength, usual, rate = zip(
                *taken[at : at + PERIODS_PER_MESSAGE], strict=True
            )
            usual, rate = [known(x) for x in usual], [known(x) for x in rate]
            out.append(Periods(list(devices), list(ts_ns), list(period), list(strength), usual, rate))
        return out

    def record(self, poll: Poll) -> None:
        """Note the NIC's bytes sent and received this poll (NaN: none read). Every poll of every
        NIC comes here, so it is a few scalar operations, not a detector's pass."""
        frame = poll.frame
        tx, rx = frame.layout.col("tx_bytes"), frame.layout.col("rx_bytes")
        values = frame.values
        if values.shape[0] == 1 and tx is not None and rx is not None:  # a NIC: two scalars
            total = values.item(0, tx) + values.item(0, rx)
        else:
            cols = [c for c in (tx, rx) if c is not None]
            if not cols:
                return
            total = float(values[:, cols].sum())
        if math.isnan(total):  # some unread: the sum of those read; none read, unknown
            block = values[:, [c for c in (tx, rx) if c is not None]]
            total = math.nan if np.isnan(block).all() else float(np.nansum(block))
        nic = self._nic(frame.device, frame.dt_s)
        at = nic.at % len(nic.ts)
        nic.ts[at], nic.rate[at] = frame.ts_ns, total
        nic.at += 1

    def update(self, poll: Poll) -> list[Symptom]:
        """A check (every ``every_s`` of the NIC's time): its window judged."""
        nic = self._nics.get(poll.frame.device)
        return [] if nic is None else self._judge(poll.frame.device, nic, poll.frame.ts_ns)

    def _open(self, device: str, nic: _Nic, ts_ns: int) -> list[Symptom]:
        """The NIC's open findings, said again at every check."""
        return [
            self._symptom(device, nic, ts_ns, since, True, what)
            for since, what in ((nic.stretched_since, "stretched"), (nic.stopped_since, "stopped"))
            if since
        ]

    def _nic(self, device: str, dt_s: float) -> _Nic:
        nic = self._nics.get(device)
        if nic is None:
            # Room for a window and a half of polls, sized by the first interval but for polls of
            # a second at least (a first interval that spans a gap would leave no room), 12 bytes
            # a poll: some 3 KB a NIC at 1 s polls.
            every = min(max(dt_s, 1e-3), 1.0)
            size = int(min(4096, np.ceil(1.5 * self.config.window_s / every) + 1))
            rates = np.full(size, np.nan, dtype=np.float32)
            nic = self._nics[device] = _Nic(np.zeros(size, dtype=np.int64), rates)
        return nic

    def _judge(self, device: str, nic: _Nic, now_ns: int) -> list[Symptom]:
        c = self.config
        if now_ns < nic.quiet_until:
            return []
        series, dt_s = _grid(nic, now_ns - int(c.window_s * _NS), now_ns)
        if series is None or len(series) < c.min_polls:
            return self._open(device, nic, now_ns)
        if np.count_nonzero(np.isfinite(series)) * dt_s < c.min_coverage * c.window_s:
            return self._open(device, nic, now_ns)  # too little read: unknown, nothing changes
        was = self._states(nic)
        self._judge_stop(nic, series, dt_s, now_ns)
        period_s = None if nic.stopped_since else self._judge_period(nic, series, dt_s, now_ns)
        if period_s and math.isfinite(period_s) and math.isfinite(nic.strength):
            self._periods.append((device, now_ns, period_s, nic.strength, nic.usual_s, _known_mean(series)))
        cleared = was - self._states(nic)
        return self._open(device, nic, now_ns) + [
            self._symptom(device, nic, now_ns, now_ns, False, what) for what in sorted(cleared)
        ]

    @staticmethod
    def _states(nic: _Nic) -> set[str]:
        """The NIC's open findings, by name."""
        open_since = (("stretched", nic.stretched_since), ("stopped", nic.stopped_since))
        return {what for what, since in open_since if since}

    def _judge_stop(self, nic: _Nic, series: np.ndarray, dt_s: float, now_ns: int) -> None:
        c = self.config
        if not np.isfinite(nic.usual_rate) or nic.usual_rate <= 0:
            return
        tail = series[-max(1, round(c.stop_s / dt_s)) :]
        if np.count_nonzero(np.isfinite(tail)) < len(tail) / 2:
            return  # the last stop_s mostly unread: unknown, not stopped
        recent = _known_mean(tail)
        if not nic.stopped_since and recent < c.stop_share * nic.usual_rate:
            nic.stopped_since = now_ns - int(c.stop_s * _NS)
            nic.stretched_since, nic.longer = 0, 0
        elif nic.stopped_since and recent >= 0.5 * nic.usual_rate:
            nic.stopped_since = 0

    def _judge_period(self, nic: _Nic, series: np.ndarray, dt_s: float, now_ns: int) -> float | None:
        """The period the traffic repeats with now (None: no rhythm strong enough to say)."""
        c = self.config
        # The common case, a rhythm that holds, at two dot products: the spectrum only when the
        # traffic no longer repeats with its usual period.
        holds = np.isfinite(nic.usual_s) and not nic.longer and not nic.stretched_since
        if holds and correlation_at(series, nic.usual_s / dt_s) >= SHARE * nic.strength:
            nic.usual_rate += c.follow * (_known_mean(series) - nic.usual_rate)
            return nic.usual_s
        acf = series_autocorrelation(series)
        found = None if acf is None else period_of(acf, dt_s)
        if acf is None or found is None or found.strength < c.min_strength:
            if not np.isfinite(nic.usual_s):  # none learned: look again later, and later
                nic.misses += 1
                wait_s = min(c.every_s * 2 ** (nic.misses - 1), c.idle_every_s)
                nic.quiet_until = now_ns + int(wait_s * _NS)
            return None
        nic.misses = 0
        nic.period_s, nic.strength = found.period_s, found.strength
        if not np.isfinite(nic.usual_s):
            if found.period_s < c.min_period_polls * dt_s:
                return None  # as likely an alias of a faster rhythm as a period
            self._learn(nic, found.period_s, _known_mean(series))
            return found.period_s
        ratio = found.period_s / nic.usual_s
        still = match_at(acf, nic.usual_s / dt_s) >= SHARE * found.strength
        whole = ratio >= 2 - c.agree and abs(ratio - round(ratio)) <= c.agree * ratio
        if ratio >= 1 + c.stretch and not still and not whole:
            nic.longer = nic.longer + 1 if _newest_agree(series, dt_s, found.period_s, c.agree) else 0
            if nic.longer >= c.confirm and not nic.stretched_since:
                nic.stretched_since = now_ns - int(c.window_s * _NS)
        elif abs(ratio - 1) <= c.agree:
            nic.longer, nic.stretched_since, nic.other = 0, 0, 0
            nic.usual_s += c.follow * (found.period_s - nic.usual_s)
            nic.usual_rate += c.follow * (_known_mean(series) - nic.usual_rate)
        else:  # another rhythm, not a stretch (shorter, or a whole multiple): not this one's
            nic.longer = 0
            if ratio < 1 + c.stretch:
                nic.stretched_since = 0
            nic.other += 1
            if nic.other >= 2 * c.learn and not nic.stretched_since:
                nic.usual_s, nic.learning, nic.other = math.nan, 0, 0  # the traffic changed: learn it
        return found.period_s

    def _learn(self, nic: _Nic, period_s: float, mean: float) -> None:
        c = self.config
        if np.isfinite(nic.candidate_s) and abs(period_s / nic.candidate_s - 1) <= c.agree:
            nic.learning += 1
            nic.candidate_s += (period_s - nic.candidate_s) / nic.learning
        else:
            nic.candidate_s, nic.learning = period_s, 1
        if nic.learning >= c.learn:
            nic.usual_s, nic.usual_rate = nic.candidate_s, mean

    def _symptom(self, device: str, nic: _Nic, ts_ns: int, since: int, on: bool, what: str) -> Symptom:
        found = evidence(
            3,
            change=what,
            period_s=nic.period_s,
            usual_period_s=nic.usual_s,
            strength=nic.strength,
            usual_rate_Bps=nic.usual_rate,
            rhythm_from_ns=since - int(self.config.window_s * _NS),
        )
        return Symptom("rhythm_change", device, ts_ns, since, on, group=what, evidence=found)


def _newest_agree(series: np.ndarray, dt_s: float, period_s: float, agree: float) -> bool:
    """Whether the newest half of the window repeats with ``period_s`` too."""
    acf = series_autocorrelation(series[len(series) // 2 :])
    found = None if acf is None else period_of(acf, dt_s)
    return found is not None and abs(found.period_s / period_s - 1) <= agree


def _known_mean(x: np.ndarray) -> float:
    """The mean of the values read (NaN: none), without ``nanmean``'s copies and warnings."""
    known = x[~np.isnan(x)]
    return float(known.mean()) if known.size else math.nan


def _grid(nic: _Nic, since_ns: int, now_ns: int) -> tuple[np.ndarray | None, float]:
    """The ring's polls since ``since_ns`` on a grid of their median interval (NaN: no poll there),
    so that gaps stay gaps."""
    keep = (nic.ts > since_ns) & (nic.ts <= now_ns)
    ts, rate = nic.ts[keep], nic.rate[keep]
    if len(ts) < 3:
        return None, 0.0
    order = np.argsort(ts)
    ts, rate = ts[order], rate[order]
    dt_ns = float(np.median(np.diff(ts)))
    if dt_ns <= 0:
        return None, 0.0
    slot = np.rint((ts - ts[0]) / dt_ns).astype(np.int64)
    grid = np.full(int(slot[-1]) + 1, np.nan)
    grid[slot] = rate
    return grid, dt_ns / _NS


def rhythm_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause | None:
    host = placement.fabric.host_of(sym.device)
    if placement.explained & {sym.device, host} or host in placement.hosts_held():
        return None  # an open incident's: a storm that holds a job's ring stops the job too
    # A phase that ran through the window before the change, in which the NIC's rhythm was
    # whole: the rhythm is that phase's job's. A job whose phase began since changed the NIC's
    # mix of traffic, not its pace. If the job no longer runs, the one that did when the finding
    # began, which stays the same finding.
    seen = int(sym.evidence.get("rhythm_from_ns", sym.start_ns))
    for at in (sym.ts_ns, sym.start_ns):
        running = placement.jobs_on(host, at)
        if not running:
            continue
        through = placement.jobs_on(host, at, seen)
        if set(running) - set(through):
            return None
        return RootCause(through[0], group=f"job:{through[0]}")
    return None


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = seen_now(incident, [s for s in group.members if s.kind == "rhythm_change"])
    if not own:
        return
    stopped = any(s.group == "stopped" for s in own)
    hosts = {d.fabric.host_of(s.device) for s in own}
    incident.hosts |= hosts
    incident.devices |= {s.device for s in own}
    incident.severity = "warning" if stopped else "info"
    d.jobs.attach(incident, hosts, incident.start_ns)
    # The NICs' middle reading: a NIC whose window still mixes the old steps and the new reads
    # a period of neither.
    usual = float(np.median([float(s.evidence.get("usual_period_s", 0.0)) for s in own]))
    period = float(np.median([float(s.evidence.get("period_s", 0.0)) for s in own]))
    incident.evidence.update(usual_period_s=round(usual, 3), period_s=round(period, 3), nics=len(own))
    who = f"job {', '.join(incident.jobs)}" if incident.jobs else f"host {', '.join(sorted(hosts))}"
    nics = f"{len(own)} NIC{'s' if len(own) > 1 else ''}"
    if stopped:
        incident.summary = (
            f"{who}: traffic stopped on {nics} (it repeated every {usual:.1f} s): a hang or a crash?"
        )
    else:
        incident.summary = f"{who}: its step stretched from {usual:.1f} s to {period:.1f} s on {nics}"


RHYTHM = IncidentKind(
    name="rhythm",
    title="Job rhythm changed",
    colour="tab:olive",
    hint=(
        "The job's steps take longer, or its traffic stopped: look at its logs and its hosts "
        "(a slow GPU, a data loader, a hang); nothing else in the fabric is open at its NICs."
    ),
    describe=describe,
    finding=True,
    explains_devices=False,
    delay_bound_s=lambda poll_s, config, severity: (
        config.rhythm.window_s + (config.rhythm.confirm + 1) * config.rhythm.every_s + poll_s
    ),
    delay="window_s + (confirm + 1) x every_s + 1 poll",
)

DETECTOR = Detector(
    name="rhythm",
    symptoms=(SymptomKind("rhythm_change", "rhythm", rhythm_root),),
    incidents=(RHYTHM,),
    device_kinds=frozenset({"nic"}),
    make=lambda config: TrafficRhythm(config.rhythm),
    config=("rhythm", RhythmConfig),
    paced=True,
    records=True,
)
