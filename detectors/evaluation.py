"""Score incidents against a trace's ground-truth labels: precision, recall, localisation, delay.

An incident matches a label of its kind when their time spans overlap (with a grace of two polls
either side for counters that lag by up to a poll). Each label credits one incident, the one with
the right root if any, else the earliest; other incidents on the same fault are duplicates and count
against precision, which measures the "one incident per root cause" promise. Where two faults of a
kind run at once, an incident at one's root is not evidence for the other (two faults merged into
one incident find one of them), and a label's delay is its own root's incident's when it has one.
An incident that overlaps no label is a false alert; benign look-alike labels never match anything.
An incident that fired linked to the incident causing it (``Anomaly.caused_by``: drops at an
incast's queue) is part of that one's alert and is never a false alert. It is scored only where
the trace labels effects of its kind (a label with a ``cause``: a job slowed by a storm at its
NIC): it is then found like any incident, localised when the incident it is linked to is the
labelled cause's (its kind, at its root), and counts against its kind's precision when it is no
labelled effect. Elsewhere it rides with its cause, unscored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fabricwatch.schemas.messages import Anomaly, Label, RootCause

_NS = 1e9


@dataclass
class Incident:
    fingerprint: str
    kind: str
    root: RootCause
    start_ns: int
    first_alert_ns: int
    end_ns: int
    caused_by: str = ""


@dataclass
class Counts:
    """What scoring counts, for one kind in one run or summed over many (``add``)."""

    labels: int = 0
    incidents: int = 0
    true_incidents: int = 0
    duplicates: int = 0
    detected: int = 0
    localised: int = 0

    @property
    def false_alerts(self) -> int:
        """Incidents that overlap no label of their kind (duplicates of a real fault excluded)."""
        return self.incidents - self.true_incidents - self.duplicates

    @property
    def precision(self) -> float | None:
        return self.true_incidents / self.incidents if self.incidents else None

    @property
    def recall(self) -> float | None:
        return self.detected / self.labels if self.labels else None

    @property
    def localisation(self) -> float | None:
        return self.localised / self.detected if self.detected else None

    def counts(self) -> Counts:
        return Counts(**{f.name: getattr(self, f.name) for f in fields(Counts)})

    def add(self, other: Counts) -> None:
        for f in fields(Counts):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class KindScore(Counts):
    kind: str = ""
    delays_s: list[float] = field(default_factory=list)

    @property
    def delay_max_s(self) -> float | None:
        return max(self.delays_s) if self.delays_s else None


@dataclass
class Evaluation:
    kinds: dict[str, KindScore]
    false_alerts: int
    hours: float

    @property
    def false_alerts_per_hour(self) -> float:
        return self.false_alerts / self.hours if self.hours else 0.0

    def to_json(self) -> dict[str, Any]:
        """The score as one JSON object (``replay --json``): per kind, the counts and the ratios
        (null where undefined: no incident, no label)."""
        return {
            "type": "score",
            "false_alerts": self.false_alerts,
            "false_alerts_per_hour": round(self.false_alerts_per_hour, 4),
            "kinds": {
                kind: {
                    **asdict(score.counts()),
                    "precision": score.precision,
                    "recall": score.recall,
                    "localisation": score.localisation,
                    "delay_max_s": score.delay_max_s,
                }
                for kind, score in sorted(self.kinds.items())
            },
        }


def incidents_of(anomalies: list[Anomaly]) -> list[Incident]:
    """Collapse lifecycle events into incidents; one fingerprint may fire again after resolving."""
    open_: dict[str, Incident] = {}
    done: list[Incident] = []
    for a in sorted(anomalies, key=lambda a: a.ts_ns):
        inc = open_.get(a.fingerprint)
        if inc is None or a.status == "firing":
            if inc is not None:
                done.append(inc)
            inc = open_[a.fingerprint] = Incident(
                a.fingerprint, a.kind, a.root, a.start_ns, a.ts_ns, a.ts_ns, a.caused_by
            )
        inc.end_ns = a.end_ns if a.end_ns is not None else max(inc.end_ns, a.ts_ns)
        if a.status == "resolved":
            done.append(open_.pop(a.fingerprint))
    return done + list(open_.values())


def evaluate(
    anomalies: list[Anomaly],
    labels: list[Label],
    poll_s: float,
    duration_s: float,
    context: list[Label] | None = None,
) -> Evaluation:
    """``context``: every label of the trace, where ``labels`` are some of them (one label scored
    alone still knows which incidents belong to the faults beside it)."""
    faults = [lb for lb in labels if lb.kind != "benign"]
    beside = [lb for lb in (context if context is not None else labels) if lb.kind != "benign"]
    every = incidents_of(anomalies)
    by_fingerprint = {i.fingerprint: i for i in every}
    effects = {lb.kind for lb in beside if lb.cause is not None}
    incidents = [i for i in every if not i.caused_by or i.kind in effects]

    def localised(inc: Incident, lb: Label) -> bool:
        if not _same_root(inc.root, lb.root):
            return False
        if lb.cause is None:
            return True
        cause = by_fingerprint.get(inc.caused_by)
        return cause is not None and cause.kind == lb.cause.kind and _same_root(cause.root, lb.cause.root)

    grace = int(2 * poll_s * _NS)
    kinds: dict[str, KindScore] = {}
    credited: set[int] = set()
    overlapping: set[int] = set()
    claimed: set[int] = set()
    """Incidents some label may take: not those at the root of another fault running beside it."""
    for lb in faults:
        score = kinds.setdefault(lb.kind, KindScore(kind=lb.kind))
        score.labels += 1
        spanning = [i for i, inc in enumerate(incidents) if inc.kind == lb.kind and _overlaps(inc, lb, grace)]
        overlapping.update(spanning)
        # An incident at the root of another fault of this kind running at the same time is that
        # fault's: two faults merged into one incident must not both count as found.
        others = [o for o in beside if o != lb and o.kind == lb.kind and not _same_root(o.root, lb.root)]
        hits = [
            i
            for i in spanning
            if _same_root(incidents[i].root, lb.root)
            or not any(
                _same_root(incidents[i].root, o.root) and _overlaps(incidents[i], o, grace) for o in others
            )
        ]
        claimed.update(hits)
        if not hits:
            continue
        at_root = [i for i in hits if localised(incidents[i], lb)]
        best = min(at_root or hits, key=lambda i: incidents[i].first_alert_ns)
        credited.add(best)
        score.detected += 1
        score.localised += bool(at_root)
        first = min(incidents[i].first_alert_ns for i in at_root or hits)
        score.delays_s.append(max(0.0, (first - lb.start_ns) / _NS))
    for i, inc in enumerate(incidents):
        score = kinds.setdefault(inc.kind, KindScore(kind=inc.kind))
        score.incidents += 1
        score.true_incidents += i in credited
        score.duplicates += i in claimed and i not in credited
    # An incident another causes fired linked to it: part of its cause's alert, never paged alone.
    false_alerts = sum(not inc.caused_by and i not in overlapping for i, inc in enumerate(incidents))
    return Evaluation(kinds, false_alerts, duration_s / 3600)


def _overlaps(inc: Incident, lb: Label, grace: int) -> bool:
    return inc.start_ns <= lb.end_ns + grace and inc.end_ns >= lb.start_ns - grace


def _same_root(found: RootCause, truth: RootCause) -> bool:
    return (
        found.device == truth.device
        and (not truth.port or found.port == truth.port)
        and (not truth.group or found.group == truth.group)
    )
