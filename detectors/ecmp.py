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

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import evidence
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.persistence import StreakTable
from fabricwatch.detectors.rates import RateFrame
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
    max_unknown_polls: int = 4
    """Polls in a row a group's shares may be unknown (a member's rate missing, or the switch not
    refreshed yet) without breaking its streak or its report: an unknown poll is neither skewed
    nor healthy. Past it, the report is no longer refreshed (stage 2 lets it expire)."""

    def __post_init__(self) -> None:
        if not 1 < self.hold_max_over_mean <= self.max_over_mean:
            raise ValueError("need 1 < hold_max_over_mean <= max_over_mean (the hold is the lower level)")
        if self.hold_hot_utilisation > self.min_hot_utilisation:
            raise ValueError("hold_hot_utilisation must not be above min_hot_utilisation")
        if self.saturated_polls > self.persist_polls:
            raise ValueError("saturated_polls must not be above persist_polls (they are of its polls)")


@dataclass
class _GroupIndex:
    groups: list[EcmpGroup]
    rows: np.ndarray
    members: np.ndarray
    window: deque = field(default_factory=deque)
    unknown_polls: int = 0
    """Polls in a row with some member's bytes unknown."""
    poll_s: float = float("inf")
    """The device's poll interval: the shortest interval seen (a poll after unknown ones spans
    several)."""
    reported: list[Symptom] = field(default_factory=list)
    """The active reports of the last known poll, said again through unknown polls."""
    saturated_polls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per group, polls of the current streak in which the hot member was saturated."""


class EcmpDetector:
    def __init__(self, config: EcmpConfig) -> None:
        self.config = config
        self._index: dict[tuple[str, tuple[str, ...], tuple[str, ...]], _GroupIndex] = {}
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
        index = self._group_index(frame, groups)
        if index.rows.size == 0:
            return []
        cfg = self.config
        index.poll_s = min(index.poll_s, frame.dt_s)
        member_tx = tx[index.rows]
        if np.isnan(member_tx[index.members]).any():
            # Unknown, not idle: a zero here would read as the group's traffic moving elsewhere.
            # The streak neither grows nor breaks; what was reported is said again, for a while.
            index.unknown_polls += 1
            if index.unknown_polls > cfg.max_unknown_polls:
                return []
            return [msgspec.structs.replace(s, ts_ns=frame.ts_ns) for s in index.reported]
        index.unknown_polls = 0
        sent = np.where(index.members, member_tx * frame.dt_s, 0.0)
        index.window.append((sent, frame.dt_s))
        while len(index.window) > cfg.window_polls:
            index.window.popleft()
        total_bytes = sum(b for b, _ in index.window)
        seconds = sum(d for _, d in index.window)
        util = np.where(index.members, total_bytes / seconds / line_Bps[index.rows], 0.0)

        n = index.members.sum(axis=1)
        group_total = total_bytes.sum(axis=1)
        shares = total_bytes / np.maximum(group_total, 1.0)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(shares > 0, shares * np.log(shares), 0.0)
            entropy = -plogp.sum(axis=1) / np.log(n) + 0.0  # + 0.0: all on one member is 0, not -0.0
            max_over_mean = shares.max(axis=1) * n
            mean = 1.0 / n
            cv = np.sqrt((np.where(index.members, (shares - mean[:, None]) ** 2, 0.0)).sum(axis=1) / n) / mean
        hot = util.max(axis=1)
        few = np.maximum(1, (n * cfg.polarised_members).astype(int))
        top_share = self._top_share(shares, few)
        streak = self._streaks.get(frame.device, hot.shape)
        saturated = (
            (hot >= cfg.min_hot_utilisation)
            | ((hot >= cfg.hold_hot_utilisation) & self._queued(frame, index, util))
        ) & (max_over_mean >= cfg.max_over_mean)
        polarised = (
            (n >= cfg.polarised_min_members)
            & (hot >= cfg.polarised_hot_utilisation)
            & (top_share >= cfg.polarised_share)
        )
        holds = (hot >= cfg.hold_hot_utilisation) & (max_over_mean >= cfg.hold_max_over_mean)
        skewed = saturated | polarised | (holds & ((streak.polls > 0) | streak.active))

        streak.step(skewed, frame.ts_ns, frame.dt_s)
        if index.saturated_polls.shape != hot.shape:
            index.saturated_polls = np.zeros(hot.shape, dtype=np.int64)
        index.saturated_polls = np.where(skewed, index.saturated_polls + saturated, 0)
        # Persistence is time: persist_polls poll intervals, however many frames brought them (a
        # frame after unknown polls spans several; with every frame one poll, this is polls), with
        # the hot member saturated in saturated_polls of them (one saturated poll of uneven hashing
        # during a burst, held by hysteresis for two more, is no collapse). A collapse below
        # saturation must last polarised_persist_s: it costs nothing yet.
        lasted = streak.seconds >= cfg.persist_polls * index.poll_s * (1 - 1e-6)
        hot_enough = index.saturated_polls >= cfg.saturated_polls
        streak.start((lasted & hot_enough) | (streak.seconds >= cfg.polarised_persist_s))
        calm = self._calm.get(frame.device, hot.shape)
        if streak.running or streak.any_active:
            calm.step(~skewed, frame.ts_ns, frame.dt_s)
        cleared = streak.stop(~skewed & (calm.polls >= cfg.clear_polls))

        def symptom(g: int, active: bool) -> Symptom:
            members = index.groups[g].members
            return Symptom(
                kind="ecmp_imbalance",
                device=frame.device,
                group=index.groups[g].id,
                ts_ns=frame.ts_ns,
                start_ns=int(streak.since_ns[g]),
                active=active,
                evidence=evidence(
                    entropy=entropy[g],
                    max_over_mean=max_over_mean[g],
                    cv=cv[g],
                    hot_utilisation=hot[g],
                    top_share=top_share[g],
                    top_members=int(few[g]),
                    shares=" ".join(
                        f"{m}={shares[g, k]:.2f}" for k, m in enumerate(members) if index.members[g, k]
                    ),
                ),
            )

        said = streak.report(cleared, symptom)
        index.reported = [s for s in said if s.active]
        return said

    @staticmethod
    def _queued(frame: RateFrame, index: _GroupIndex, util: np.ndarray) -> np.ndarray:
        """Whether each group's hottest member ECN-marked packets this poll: its queue stood past
        Kmin, which a port only builds while it sends at line rate. A noisy byte counter can read
        a saturated uplink at 0.75 of line rate for polls on end (20% noise); its marks say what
        the rate reading cannot."""
        marks, _ = frame.indexed("queue_ecn_marked_packets")
        if marks.size == 0:
            return np.zeros(util.shape[0], dtype=bool)
        hottest = index.rows[np.arange(util.shape[0]), util.argmax(axis=1)]
        return np.nan_to_num(marks[hottest]).max(axis=1) > 0

    @staticmethod
    def _top_share(shares: np.ndarray, few: np.ndarray) -> np.ndarray:
        """Share of each group's traffic on its ``few`` busiest members."""
        ranked = -np.sort(-shares, axis=1)
        taken = np.arange(shares.shape[1])[None, :] < few[:, None]
        return np.where(taken, ranked, 0.0).sum(axis=1)

    def _group_index(self, frame: RateFrame, groups: list[EcmpGroup]) -> _GroupIndex:
        """Row numbers of each group's members in this device's port list, padded to a matrix."""
        key = (frame.device, tuple(frame.ports), tuple(g.id for g in groups))
        index = self._index.get(key)
        if index is None:
            where = {p: i for i, p in enumerate(frame.ports)}
            usable = [g for g in groups if sum(m in where for m in g.members) >= 2]
            width = max((len(g.members) for g in usable), default=0)
            rows = np.zeros((len(usable), width), dtype=np.intp)
            members = np.zeros((len(usable), width), dtype=bool)
            for gi, g in enumerate(usable):
                for k, m in enumerate(g.members):
                    if m in where:
                        rows[gi, k], members[gi, k] = where[m], True
            index = self._index[key] = _GroupIndex(usable, rows, members)
        return index


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
    incident.summary = (
        f"ECMP collapse on {root.group}: entropy {latest.evidence.get('entropy')}, "
        f"max/mean {latest.evidence.get('max_over_mean')} ({latest.evidence.get('shares')}){job}"
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
