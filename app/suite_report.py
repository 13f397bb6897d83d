"""The evaluation's scores: what one scenario's run found against its labels, and those results
pooled per kind across the suite (and its seeds), checked against the thresholds, with every
failure traced back to the labels and false alerts behind it. ``evaluate.py`` runs the scenarios;
``console.py`` prints what this module computes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.evaluation import Counts
from fabricwatch.detectors.registry import REGISTRY
from fabricwatch.schemas.messages import RootCause

GATING_RULE = (
    "a kind is held to the thresholds when the suite has at least one label of it and its detector "
    "is enabled; other kinds are reported only. False alerts per hour count every kind."
)
TOTAL = "all kinds"
_EPS_S = 1e-6  # float slack on delay bounds; label and alert times are integer ns


@dataclass(frozen=True)
class Thresholds:
    """Acceptance of the "detection users can trust" issue; PFC storm delay is per label."""

    precision: float = 0.95
    recall: float = 0.95
    localisation: float = 0.9
    false_alerts_per_hour: float = 1.0

    @staticmethod
    def delay_bound_s(kind: str, poll_s: float, config: DetectorConfig, severity: str = "") -> float | None:
        """The kind's own promise (``spec.IncidentKind.delay_bound_s``): the PFC storm's is SONiC's
        watchdog latency, the others a number of polls; None for a kind that makes none."""
        declared = REGISTRY.incidents.get(kind)
        if declared is None or declared.delay_bound_s is None:
            return None
        return declared.delay_bound_s(poll_s, config, severity)


@dataclass
class LabelResult:
    kind: str
    start_s: float
    end_s: float
    root: str
    detected: bool
    localised: bool
    found_roots: list[str]
    duplicates: int
    delay_s: float | None
    delay_polls: float | None
    delay_bound_s: float | None
    missed_polls: int = 0
    """Snapshots of the root's device that never arrived within the bound, each adding a poll to it."""

    @property
    def late(self) -> bool:
        return (
            self.delay_s is not None
            and self.delay_bound_s is not None
            and (self.delay_s > self.delay_bound_s + _EPS_S)
        )


@dataclass
class FalseAlert:
    kind: str
    root: str
    start_s: float
    first_alert_s: float
    end_s: float


@dataclass
class ScenarioResult:
    path: str
    name: str
    seed: int
    hosts: int
    poll_s: float
    duration_s: float
    benign_only: bool
    wall_s: float
    kinds: dict[str, Counts]
    labels: list[LabelResult]
    false_alerts: list[FalseAlert]


@dataclass
class Check:
    name: str
    value: float | None
    threshold: float
    ok: bool


@dataclass
class KindSummary:
    kind: str
    counts: Counts = field(default_factory=Counts)
    delays_s: list[float] = field(default_factory=list)
    delays_polls: list[float] = field(default_factory=list)
    benign_false_alerts: int = 0
    benign_hours: float = 0.0
    gated: bool = False
    checks: list[Check] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return self.counts.precision

    @property
    def recall(self) -> float | None:
        return self.counts.recall

    @property
    def localisation(self) -> float | None:
        return self.counts.localisation

    @property
    def false_alerts_per_hour(self) -> float | None:
        return self.benign_false_alerts / self.benign_hours if self.benign_hours else None

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)


@dataclass
class Failure:
    """One reason the suite fails, with what the lead needs to find it in a trace."""

    kind: str
    check: str
    scenario: str = ""
    detail: str = ""


@dataclass
class SuiteReport:
    scenarios: list[ScenarioResult]
    kinds: dict[str, KindSummary]
    total: KindSummary
    thresholds: Thresholds
    failures: list[Failure]
    wall_s: float

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "gating_rule": GATING_RULE,
            "thresholds": asdict(self.thresholds),
            "wall_s": round(self.wall_s, 3),
            "kinds": {k: _summary_json(s) for k, s in sorted(self.kinds.items())},
            "total": _summary_json(self.total),
            "failures": [asdict(f) for f in self.failures],
            "scenarios": [asdict(s) for s in self.scenarios],
        }


@dataclass
class SeedsReport:
    """The suite under several seeds: it passes only if it passes under every one."""

    by_seed: dict[int | None, SuiteReport]
    thresholds: Thresholds
    wall_s: float

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.by_seed.values())

    def worst(self, kind: str) -> tuple[int | None, KindSummary]:
        """The seed where ``kind`` did worst: failing before passing, then the lowest of precision,
        recall and localisation, then the longest delay in polls, then the most false alerts."""

        def badness(item: tuple[int | None, KindSummary]) -> tuple[float, ...]:
            s = item[1]
            ratios = [x for x in (s.precision, s.recall, s.localisation) if x is not None]
            return (
                not s.passed,
                -min(ratios, default=1.0),
                max(s.delays_polls, default=0.0),
                s.false_alerts_per_hour or 0.0,
            )

        return max(self.kind_by_seed(kind).items(), key=badness)

    def kind_by_seed(self, kind: str) -> dict[int | None, KindSummary]:
        """``kind``'s summary under each seed (``TOTAL`` for all kinds together)."""
        return {
            seed: r.total if kind == TOTAL else r.kinds.get(kind, KindSummary(kind))
            for seed, r in self.by_seed.items()
        }

    def mean(self, kind: str) -> dict[str, float | None]:
        """``kind``'s ratios, longest delay and false-alert rate averaged over the seeds that have them."""
        return _mean_json(list(self.kind_by_seed(kind).values()))

    def kinds(self) -> list[str]:
        return sorted({k for r in self.by_seed.values() for k in r.kinds})

    def to_json(self) -> dict[str, Any]:
        per_kind = {}
        for kind in [*self.kinds(), TOTAL]:
            seed, worst = self.worst(kind)
            per_kind[kind] = {
                "mean": self.mean(kind),
                "worst_seed": seed,
                "worst": _summary_json(worst),
            }
        return {
            "passed": self.passed,
            "seeds": list(self.by_seed),
            "wall_s": round(self.wall_s, 3),
            "kinds": per_kind,
            "by_seed": [{"seed": seed, **r.to_json()} for seed, r in self.by_seed.items()],
        }


def score_suite(
    results: list[ScenarioResult], enabled_kinds: frozenset[str], thresholds: Thresholds
) -> SuiteReport:
    """Scenario results pooled per kind, checked against the thresholds, failures traced to labels."""
    kinds, total = _aggregate(results, enabled_kinds, thresholds)
    failures = _failures(results, kinds, total)
    return SuiteReport(results, kinds, total, thresholds, failures, sum(r.wall_s for r in results))


def root_text(r: RootCause) -> str:
    where = r.group or ":".join(x for x in (r.device, r.port) if x)
    return f"{where} prio {r.priority}" if r.priority is not None else where


def _aggregate(
    results: list[ScenarioResult], enabled: frozenset[str], th: Thresholds
) -> tuple[dict[str, KindSummary], KindSummary]:
    kinds: dict[str, KindSummary] = {}
    total = KindSummary(TOTAL, gated=True)
    for r in results:
        hours = r.duration_s / 3600 if r.benign_only else 0.0
        total.benign_hours += hours
        for kind, c in r.kinds.items():
            s = kinds.setdefault(kind, KindSummary(kind))
            s.counts.add(c)
            total.counts.add(c)
            if r.benign_only:
                s.benign_false_alerts += c.false_alerts
                total.benign_false_alerts += c.false_alerts
        for lb in r.labels:
            if lb.delay_s is not None:
                kinds[lb.kind].delays_s.append(lb.delay_s)
                kinds[lb.kind].delays_polls.append(lb.delay_s / r.poll_s)
    for s in kinds.values():
        s.benign_hours = total.benign_hours
        s.gated = s.counts.labels > 0 and s.kind in enabled
        s.checks = _checks(s, th, results) if s.gated else []
    total.checks = [_rate_check(total, th)]
    return kinds, total


def _checks(s: KindSummary, th: Thresholds, results: list[ScenarioResult]) -> list[Check]:
    labels = [lb for r in results for lb in r.labels if lb.kind == s.kind]
    late = sum(lb.late for lb in labels)
    checks = [
        _at_least("precision", s.precision, th.precision),
        _at_least("recall", s.recall, th.recall),
        _at_least("localisation", s.localisation, th.localisation),
        Check("labels detected late", late, 0, late == 0),
        _rate_check(s, th),
    ]
    return checks


def _at_least(name: str, value: float | None, threshold: float) -> Check:
    """A missing ratio (no incidents at all) fails: recall already says why."""
    return Check(name, value, threshold, value is not None and value >= threshold)


def _rate_check(s: KindSummary, th: Thresholds) -> Check:
    rate = s.false_alerts_per_hour
    return Check(
        "false alerts per benign hour",
        rate,
        th.false_alerts_per_hour,
        (rate or 0.0) <= th.false_alerts_per_hour,
    )


def _failures(
    results: list[ScenarioResult], kinds: dict[str, KindSummary], total: KindSummary
) -> list[Failure]:
    """Every failed check, then the labels and alerts behind it not already cited by an earlier one."""
    out: list[Failure] = []
    cited: set[tuple[str, str, str]] = set()
    for s in [*sorted(kinds.values(), key=lambda s: s.kind), total]:
        for c in s.checks:
            if c.ok:
                continue
            out.append(Failure(s.kind, c.name, detail=f"{_fmt(c.value)} vs {_fmt(c.threshold)}"))
            for f in _culprits(s.kind, c.name, results):
                if (f.kind, f.scenario, f.detail) not in cited:
                    cited.add((f.kind, f.scenario, f.detail))
                    out.append(f)
    return out


def _culprits(kind: str, check: str, results: list[ScenarioResult]) -> Iterator[Failure]:
    for r in results:
        if check == "precision" or (check == "false alerts per benign hour" and r.benign_only):
            yield from _false_alert_groups(kind, r)
        for lb in r.labels:
            why = _label_problem(lb, check) if lb.kind == kind else ""
            if why:
                yield Failure(
                    kind, check, r.name, f"label {lb.start_s:.3f}-{lb.end_s:.3f} s {lb.root}: {why}"
                )


def _false_alert_groups(kind: str, r: ScenarioResult) -> Iterator[Failure]:
    """One line per root: a flapping detector re-fires on the same root many times."""
    groups: dict[tuple[str, str], list[FalseAlert]] = {}
    for fa in r.false_alerts:
        if kind in (fa.kind, TOTAL):
            groups.setdefault((fa.kind, fa.root), []).append(fa)
    for (fa_kind, root), alerts in groups.items():
        first = min(fa.first_alert_s for fa in alerts)
        yield Failure(
            fa_kind, "false alert", r.name, f"{root}: {len(alerts)} incident(s), first alert at {first:.3f} s"
        )


def _label_problem(lb: LabelResult, check: str) -> str:
    if check == "recall" and not lb.detected:
        return "missed"
    if check == "localisation" and lb.detected and not lb.localised:
        return f"found at {_some(lb.found_roots)}"
    if check == "precision" and lb.duplicates:
        return f"{lb.duplicates} duplicate incident(s) at {_some(lb.found_roots)}"
    if check == "labels detected late" and lb.late:
        gaps = f", {lb.missed_polls} poll(s) of the root's device missing in it" if lb.missed_polls else ""
        return f"delay {lb.delay_s:.3f} s ({lb.delay_polls:.2f} polls) > bound {lb.delay_bound_s:.3f} s{gaps}"
    return ""


def _some(roots: list[str], shown: int = 6) -> str:
    more = f" and {len(roots) - shown} more" if len(roots) > shown else ""
    return ", ".join(roots[:shown]) + more


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank: a delay some label actually had, never an interpolation between two."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _summary_json(s: KindSummary) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float | None]:
        return {
            "max": max(values, default=None),
            "p50": percentile(values, 50),
            "p95": percentile(values, 95),
        }

    return {
        **asdict(s.counts),
        "false_alerts": s.counts.false_alerts,
        "precision": s.precision,
        "recall": s.recall,
        "localisation": s.localisation,
        "delay_s": stats(s.delays_s),
        "delay_polls": stats(s.delays_polls),
        "benign_false_alerts": s.benign_false_alerts,
        "benign_hours": s.benign_hours,
        "false_alerts_per_hour": s.false_alerts_per_hour,
        "gated": s.gated,
        "passed": s.passed if s.gated else None,
        "checks": [asdict(c) for c in s.checks],
    }


def _mean_of(values: list[float | None]) -> float | None:
    """The mean of the values a seed had (a kind with no incidents under a seed has no precision)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _mean_json(summaries: list[KindSummary]) -> dict[str, float | None]:
    return {
        "precision": _mean_of([s.precision for s in summaries]),
        "recall": _mean_of([s.recall for s in summaries]),
        "localisation": _mean_of([s.localisation for s in summaries]),
        "max_delay_polls": _mean_of([max(s.delays_polls, default=None) for s in summaries]),
        "false_alerts_per_hour": _mean_of([s.false_alerts_per_hour for s in summaries]),
    }
