"""ECMP entropy collapse, per device: member byte shares of each ECMP group over the last polls.

Three views of the same shares, as docs/detectors.md asks: normalised Shannon entropy H/ln(N) (1 is
perfectly even), max/mean, and the coefficient of variation; max/mean decides (see
detectors/config.py for why entropy does not), the others are evidence. The group must
carry load that matters, judged by its hottest member's utilisation, because the cost of collapse
is a saturated uplink next to idle ones; and the skew must persist. Below saturation, traffic
polarised onto few members for ``polarised_persist_s`` is reported too; stage 2 makes it a warning
(critical once the hot member saturates).
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import evidence
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.persistence import StreakTable
from fabricwatch.detectors.rates import STALE_MAX_S, RateFrame
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Poll, SymptomKind
from fabricwatch.schemas.config import AtLeastOne, Fraction, Positive
from fabricwatch.schemas.messages import EcmpGroup, RootCause, Symptom


class EcmpConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    window_polls: AtLeastOne = 1
    max_over_mean: Positive = 1.5
    min_hot_utilisation: Fraction = 0.9
    hold_max_over_mean: Positive = 1.25
    hold_hot_utilisation: Fraction = 0.7
    persist_polls: AtLeastOne = 3
    polarised_share: Fraction = 0.8
    """A group is polarised when its hottest ``polarised_members`` (at least one) carry this share
    of its traffic while the rest idle: a warning before it saturates."""
    polarised_members: Fraction = 0.125
    """"Few" members, as a share of the group's (one of eight: one of 4-15, two of 16-23, ...)."""
    polarised_min_members: AtLeastOne = 4
    """Smaller groups are left to the saturated test: two flows on one of two members is chance."""
    polarised_hot_utilisation: Fraction = 0.25
    """The hot member must carry real load: a trickle on one uplink is nothing to warn about."""
    polarised_persist_s: Positive = 30.0
    """Long enough that it is no single flow's burst (seconds, at any poll interval)."""
    saturated_polls: AtLeastOne = 2
    """Polls of a collapse's first ``persist_polls`` in which the hot member must be saturated: the
    hysteresis (``hold_*``) keeps a reported collapse, it must not make one of a single saturated
    poll (uneven hashing in a burst, at 100 ms polls, fired after 0.3 s)."""
    clear_polls: AtLeastOne = 2
    """Polls in a row without skew that end a reported collapse: one noisy reading of a saturated
    uplink (20% noise reads 1.0 as 0.8, under the 0.7 hold with a little more) must not end it and
    start it again a few seconds later as a second incident."""
    lack_of_data_s: Positive = 60.0
    """How long a reported collapse is held through polls that cannot judge it (a member's bytes
    unknown, or the group carrying too little to show a skew: a whole poll of zeros between two
    refreshes, a gap) before it ends for lack of data. Such a poll neither grows nor breaks a
    streak: resolution needs a poll that shows the traffic spread again."""

    def __post_init__(self) -> None:
        if not 1 < self.hold_max_over_mean <= self.max_over_mean:
            raise ValueError("need 1 < hold_max_over_mean <= max_over_mean (the hold is the lower level)")
        if self.hold_hot_utilisation > self.min_hot_utilisation:
            raise ValueError("hold_hot_utilisation must not be above min_hot_utilisation")
        if self.saturated_polls > self.persist_polls:
            raise ValueError("saturated_polls must not be above persist_polls (they are of its polls)")


@dataclass(frozen=True)
class _Layout:
    """Where each group's members are in one port list: row numbers padded to a matrix."""

    rows: np.ndarray
    members: np.ndarray
    """Declared members of the group (padding false)."""
    present: np.ndarray
    """Members present in this port list: one absent from a snapshot is unknown, not idle."""


@dataclass
class _Groups:
    """A device's ECMP groups and what the detector remembers of them between polls."""

    groups: list[EcmpGroup]
    layouts: dict[tuple[str, ...], _Layout] = field(default_factory=dict)
    window: deque = field(default_factory=deque)
    poll_s: float = float("inf")
    """The device's poll interval: the shortest interval seen (a poll after a gap spans several)."""
    last_known_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per group, the last poll that could judge it."""
    saturated_polls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per group, polls of the current streak in which the hot member was saturated."""
    held_tx: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    held_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    """Per member, its last known egress rate and when it was read (``EcmpDetector._held``)."""


class EcmpDetector:
    def __init__(self, config: EcmpConfig) -> None:
        self.config = config
        self._devices: dict[tuple[str, tuple[str, ...]], _Groups] = {}
        self._streaks = StreakTable()
        self._calm = StreakTable()

    def open(self, device: str) -> bool:
        return self._streaks.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        frame, line_Bps = poll.frame, poll.line_Bps
        groups = poll.fabric.ecmp_groups(frame.device)
        tx = frame.port("tx_bytes")
        if not groups or tx is None:
            return []
        state = self._groups(frame.device, groups)
        if not state.groups:
            return []
        layout = self._layout(state, frame.ports)
        cfg = self.config
        state.poll_s = min(state.poll_s, frame.dt_s)
        member_tx, fresh = self._held(state, np.where(layout.present, tx[layout.rows], np.nan), frame.ts_ns)
        members = self._up(frame, layout)
        missing = (np.isnan(member_tx) & members).any(axis=1)
        sent = np.where(members, np.nan_to_num(member_tx) * frame.dt_s, 0.0)
        state.window.append((sent, frame.dt_s, missing))
        while len(state.window) > cfg.window_polls:
            state.window.popleft()
        total_bytes = sum(b for b, _, _ in state.window)
        seconds = sum(d for _, d, _ in state.window)
        missing = np.logical_or.reduce([m for _, _, m in state.window])
        line = np.where(members, line_Bps[layout.rows], np.nan)
        util = np.where(members, total_bytes / seconds / line, 0.0)

        n = members.sum(axis=1)
        group_total = total_bytes.sum(axis=1)
        shares = total_bytes / np.maximum(group_total, 1.0)[:, None]
        max_over_mean = shares.max(axis=1) * n
        spread = functools.cache(lambda: _spread(shares, members, n))  # evidence: for a report only
        hot = util.max(axis=1)
        # A poll can judge a group when every member's bytes are known and the group carried enough
        # that, all on one member, it would show: less (a poll of zeros between two refreshes of
        # the switch's counters, the job between steps) is neither balanced nor skewed.
        carried = group_total / seconds / np.nanmax(line, axis=1)
        # And its hottest member must be read in this poll: a held reading beside fresh ones
        # (a busy member between refreshes, next to one whose traffic just dropped) is no skew.
        hot_fresh = fresh[np.arange(len(hot)), util.argmax(axis=1)]
        known = (
            ~missing
            & hot_fresh
            & (carried >= min(cfg.hold_hot_utilisation, cfg.polarised_hot_utilisation))
            & (n >= 2)  # a group down to one member has no balance to judge (its link incidents say why)
        )
        few = np.maximum(1, (n * cfg.polarised_members).astype(int))
        top_share = functools.cache(lambda: self._top_share(shares, few))
        streak = self._streaks.get(frame.device, hot.shape)
        warm = hot >= cfg.hold_hot_utilisation  # below it no group saturates or holds (min_hot is above)
        saturated = np.zeros(hot.shape, dtype=bool)
        if warm.any():
            saturated = ((hot >= cfg.min_hot_utilisation) | (warm & self._queued(frame, layout, util))) & (
                max_over_mean >= cfg.max_over_mean
            )
        polarised = (n >= cfg.polarised_min_members) & (hot >= cfg.polarised_hot_utilisation)
        if polarised.any():  # most polls: no group big and busy enough, and no members to sort
            polarised &= top_share() >= cfg.polarised_share
        holds = warm & (max_over_mean >= cfg.hold_max_over_mean)
        skewed = known & (saturated | polarised | (holds & ((streak.polls > 0) | streak.active)))

        # A poll that cannot judge the group, within STALE_MAX_S of one that could, still counts
        # in a streak's time: a busy member between refreshes leaves a third of the polls unknown,
        # and a collapse below saturation must be found when it has lasted, not when 30 s of it
        # were read.
        bridged = frame.ts_ns - state.last_known_ns <= STALE_MAX_S * 1e9 if state.last_known_ns.size else None
        streak.step(skewed, frame.ts_ns, frame.dt_s, known=known, bridged=bridged)
        if state.saturated_polls.shape != hot.shape:
            state.saturated_polls = np.zeros(hot.shape, dtype=np.int64)
            state.last_known_ns = np.full(hot.shape, frame.ts_ns, dtype=np.int64)
        state.saturated_polls = np.where(
            known, np.where(skewed, state.saturated_polls + saturated, 0), state.saturated_polls
        )
        state.last_known_ns = np.where(known, frame.ts_ns, state.last_known_ns)
        # Persistence is time: persist_polls poll intervals, however many frames brought them (a
        # frame after a gap spans several; with every frame one poll, this is polls), with the hot
        # member saturated in saturated_polls of them (one saturated poll of uneven hashing during
        # a burst, held by hysteresis for two more, is no collapse). A collapse below saturation
        # must last polarised_persist_s: it costs nothing yet.
        lasted = streak.seconds >= cfg.persist_polls * state.poll_s * (1 - 1e-6)
        hot_enough = state.saturated_polls >= cfg.saturated_polls
        streak.start((lasted & hot_enough) | (streak.seconds >= cfg.polarised_persist_s))
        calm = self._calm.get(frame.device, hot.shape)
        if streak.running or streak.any_active:
            calm.step(~skewed, frame.ts_ns, frame.dt_s, known=known)
        cleared = streak.stop(~skewed & known & (calm.polls >= cfg.clear_polls))
        ended = streak.lapse(frame.ts_ns, cfg.lack_of_data_s)

        def symptom(g: int, active: bool) -> Symptom:
            entropy, cv = spread()
            names = state.groups[g].members
            down = [m for k, m in enumerate(names) if layout.members[g, k] and not members[g, k]]
            return Symptom(
                kind="ecmp_imbalance",
                device=frame.device,
                group=state.groups[g].id,
                ts_ns=frame.ts_ns,
                start_ns=int(streak.since_ns[g]),
                active=active,
                evidence=evidence(
                    entropy=entropy[g],
                    max_over_mean=max_over_mean[g],
                    cv=cv[g],
                    hot_utilisation=hot[g],
                    top_share=top_share()[g],
                    top_members=int(few[g]),
                    shares=" ".join(f"{m}={shares[g, k]:.2f}" for k, m in enumerate(names) if members[g, k]),
                    **fewer_members(down, int(n[g])),
                ),
            )

        return streak.report(cleared, symptom, known, frame.ts_ns, ended)

    @staticmethod
    def _up(frame: RateFrame, layout: _Layout) -> np.ndarray:
        """The members whose link is up (or not known to be down): a member that is down carries
        nothing because its traffic hashes onto the others, as ECMP is meant to; the group runs
        on fewer members, which is no collapse, and its balance is judged among the rest."""
        down = frame.port("oper_down")
        if down is None:
            return layout.members
        return layout.members & ~(layout.present & (down[layout.rows] > 0.5))

    @staticmethod
    def _held(state: _Groups, member_tx: np.ndarray, ts_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Each member's rate, or, where it is unknown this poll, its last known one if that is
        recent (``STALE_MAX_S``): a switch that refreshes each port every second, read every half
        second, leaves a different half of a group's members unknown in every poll, and no poll
        would judge the group; a member's rate over its last refresh is the best reading of it.
        Returns the rates and where they were read in this poll."""
        if state.held_tx.shape != member_tx.shape:
            state.held_tx = np.full(member_tx.shape, np.nan)
            state.held_ns = np.zeros(member_tx.shape, dtype=np.int64)
        fresh = ~np.isnan(member_tx)
        state.held_tx = np.where(fresh, member_tx, state.held_tx)
        state.held_ns = np.where(fresh, ts_ns, state.held_ns)
        recent = ts_ns - state.held_ns <= STALE_MAX_S * 1e9
        return np.where(fresh, member_tx, np.where(recent, state.held_tx, np.nan)), fresh

    @staticmethod
    def _queued(frame: RateFrame, layout: _Layout, util: np.ndarray) -> np.ndarray:
        """Whether each group's hottest member ECN-marked packets this poll: its queue stood past
        Kmin, which a port only builds while it sends at line rate. A noisy byte counter can read
        a saturated uplink at 0.75 of line rate for polls on end (20% noise); its marks say what
        the rate reading cannot."""
        marks, _ = frame.indexed("queue_ecn_marked_packets")
        if marks.size == 0:
            return np.zeros(util.shape[0], dtype=bool)
        hottest = layout.rows[np.arange(util.shape[0]), util.argmax(axis=1)]
        return np.nan_to_num(marks[hottest]).max(axis=1) > 0

    @staticmethod
    def _top_share(shares: np.ndarray, few: np.ndarray) -> np.ndarray:
        """Share of each group's traffic on its ``few`` busiest members."""
        ranked = -np.sort(-shares, axis=1)
        taken = np.arange(shares.shape[1])[None, :] < few[:, None]
        return np.where(taken, ranked, 0.0).sum(axis=1)

    def _groups(self, device: str, groups: list[EcmpGroup]) -> _Groups:
        """The device's groups with at least two members (a group of one has no balance)."""
        key = (device, tuple(g.id for g in groups))
        state = self._devices.get(key)
        if state is None:
            state = self._devices[key] = _Groups([g for g in groups if len(set(g.members)) >= 2])
        return state

    @staticmethod
    def _layout(state: _Groups, ports: list[str]) -> _Layout:
        """Row numbers of each group's members in this port list (cached per list: a switch's
        snapshot lists the same ports poll after poll, but may leave one out)."""
        key = tuple(ports)
        layout = state.layouts.get(key)
        if layout is None:
            where = {p: i for i, p in enumerate(ports)}
            width = max(len(g.members) for g in state.groups)
            rows = np.zeros((len(state.groups), width), dtype=np.intp)
            members = np.zeros((len(state.groups), width), dtype=bool)
            present = np.zeros((len(state.groups), width), dtype=bool)
            for gi, g in enumerate(state.groups):
                for k, m in enumerate(g.members):
                    members[gi, k] = True
                    if m in where:
                        rows[gi, k], present[gi, k] = where[m], True
            layout = state.layouts[key] = _Layout(rows, members, present)
        return layout


def _spread(shares: np.ndarray, members: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each group's Shannon entropy of its members' shares over ln(members), and their coefficient
    of variation: the evidence beside max/mean, which decides. Only a poll that reports a group
    needs them (most polls report none), so only such a poll computes them."""
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(shares > 0, shares * np.log(shares), 0.0)
        entropy = -plogp.sum(axis=1) / np.log(n) + 0.0  # + 0.0: all on one member is 0, not -0.0
        mean = 1.0 / n
        cv = np.sqrt((np.where(members, (shares - mean[:, None]) ** 2, 0.0)).sum(axis=1) / n) / mean
    return entropy, cv


def fewer_members(down: list[str], up: int) -> dict[str, str]:
    """Evidence of a group that runs on fewer members than it has (none when all are up)."""
    return {"members_down": " ".join(down), "members_up": f"{up} of {up + len(down)}"} if down else {}


# Stage 2: one incident per group, naming the jobs whose host pairs cross the switch.

DELAY_POLLS = 5.0
"""Found within this many polls of the collapse's start (``persist_polls`` of them, and slack)."""


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    root = incident.root
    under = d.fabric.hosts_under(root.device)
    if float(latest.evidence.get("hot_utilisation", 0)) >= 0.9:
        # The incident's worst, like its peak queue: a hot member swinging around 90% would
        # otherwise flip the severity, and every receiver's alert with it, every few polls.
        incident.severity = "critical"
    matched = d.jobs.attach(incident, under, incident.start_ns, cross_from=under)
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    pairs = incident.evidence.get("crossing_host_pairs")
    if matched and pairs:
        job += f" ({pairs} host pairs of {matched[0].job} cross {root.device})"
    fewer = ""
    if latest.evidence.get("members_down"):
        up, down = latest.evidence.get("members_up"), latest.evidence["members_down"]
        fewer = f"; running on {up} members ({down} down)"
    incident.summary = (
        f"ECMP collapse on {root.group}: entropy {latest.evidence.get('entropy')}, "
        f"max/mean {latest.evidence.get('max_over_mean')} ({latest.evidence.get('shares')}){fewer}{job}"
    )


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """A collapse below saturation (a warning) is reported once it has lasted polarised_persist_s."""
    waited = config.ecmp.polarised_persist_s if severity == "warning" else 0.0
    return waited + DELAY_POLLS * poll_s


COLLAPSE = IncidentKind(
    name="ecmp_collapse",
    title="ECMP collapse",
    colour="tab:purple",
    hint=(
        "Few long flows hash onto few uplinks: raise NCCL_IB_QPS_PER_CONNECTION, put the QPN in the "
        "ECMP hash (UDF / enhanced ECMP), or enable adaptive routing."
    ),
    describe=describe,
    delay_bound_s=_delay_bound_s,
    delay=f"{DELAY_POLLS:g} polls (below saturation + polarised_persist_s)",
)
DETECTOR = Detector(
    name="ecmp",
    symptoms=(
        SymptomKind(
            "ecmp_imbalance",
            "ecmp_collapse",
            lambda placement, key, sym: RootCause(sym.device, group=sym.group),
        ),
    ),
    incidents=(COLLAPSE,),
    device_kinds=frozenset({"switch"}),
    make=lambda config: EcmpDetector(config.ecmp),
    config=("ecmp", EcmpConfig),
)
