"""Score the detectors on a suite of labelled scenarios: what ``fabricwatch evaluate`` runs.

One scenario alone says little (a handful of labels, a few simulated minutes), so the scores that
matter are pooled per kind across the whole suite and checked against the acceptance thresholds.
Matching a label to incidents is ``detectors.evaluation.evaluate``'s job and is never re-implemented
here: per-label and per-incident details come from calling it on one label or one incident at a time.

Scenarios are independent, so they run in worker processes; results come back in argument order,
and everything but the wall times is the same for the same files, seed and configuration.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.evaluation import Counts, Evaluation, Incident, evaluate, incidents_of
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.registry import REGISTRY
from fabricwatch.ingest.simulator import Scenario, load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, Label, RootCause
from fabricwatch.schemas.trace import TraceReader


def rule_kinds() -> frozenset[str]:
    """Kinds whose detector always runs; those that need a learned model (``outlier``) join them
    only when one is loaded (``REGISTRY.kinds(needs_model=True)``)."""
    return REGISTRY.kinds(needs_model=False)


GATING_RULE = (
    "a kind is held to the thresholds when the suite has at least one label of it and its detector "
    "is enabled; other kinds are reported only. False alerts per hour count every kind."
)
TOTAL = "all kinds"
_EPS_S = 1e-6  # float slack on delay bounds; label and alert times are integer ns

PipelineFactory = Callable[[DetectorConfig], Pipeline]
"""Builds the pipeline for one scenario; must be picklable (a module-level function or a
``functools.partial`` of one) because scenarios run in worker processes."""


class ScenarioRunError(ValueError):
    """A scenario that validated but could not be simulated or replayed (a bug, not a score)."""


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


def scenario_paths(args: list[Path]) -> list[Path]:
    """Files as given; a directory stands for its ``*.yaml`` files, sorted so runs compare."""
    paths: list[Path] = []
    for arg in args:
        if arg.is_dir():
            found = sorted(arg.glob("*.yaml"))
            if not found:
                raise ValueError(f"{arg}: no *.yaml scenario in this directory")
            paths.extend(found)
        elif arg.is_file():
            paths.append(arg)
        else:
            raise ValueError(f"{arg}: no such scenario file or directory")
    return paths


def pipeline_with_model(model_path: Path, config: DetectorConfig) -> Pipeline:
    """A pipeline running the learned outlier detector too (bind ``model_path`` with functools.partial:
    each worker process loads the model itself)."""
    from fabricwatch.detectors.outliers import load_detector

    return Pipeline(config, outliers=load_detector(model_path, config.outliers))


_Job = tuple[Path, Scenario, DetectorConfig, int | None, PipelineFactory, Thresholds]
"""One run: a scenario under one seed (``None``: its own)."""


def run_suite(
    paths: list[Path],
    config: DetectorConfig | None = None,
    seed: int | None = None,
    pipeline_factory: PipelineFactory = Pipeline,
    enabled_kinds: frozenset[str] | None = None,
    thresholds: Thresholds | None = None,
    workers: int = 1,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> SuiteReport:
    """Validate every scenario first (a typo should not surface after minutes of work), then run them.

    ``enabled_kinds`` says which detectors the pipeline runs (default ``rule_kinds()``): pass
    ``REGISTRY.kinds()`` with a factory that loads an outlier model, so outlier labels start to
    count.
    """
    report = run_seeds(paths, [seed], config, pipeline_factory, enabled_kinds, thresholds, workers, on_result)
    return report.by_seed[seed]


def run_seeds(
    paths: list[Path],
    seeds: list[int | None],
    config: DetectorConfig | None = None,
    pipeline_factory: PipelineFactory = Pipeline,
    enabled_kinds: frozenset[str] | None = None,
    thresholds: Thresholds | None = None,
    workers: int = 1,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> SeedsReport:
    """The suite once per seed (``None``: each scenario's own), every run in one pool of workers,
    scored per seed as ``run_suite`` scores one: a detector that passes by the luck of one seed's
    noise and timing fails under another, so a gate is only as good as its worst seed."""
    started = time.perf_counter()
    config = config or DetectorConfig()
    thresholds = thresholds or Thresholds()
    scenarios = [(p, load_scenario(p)) for p in paths]
    jobs = [(p, sc, config, seed, pipeline_factory, thresholds) for seed in seeds for p, sc in scenarios]
    results: list[ScenarioResult] = []
    for result in _run_all(jobs, workers):
        results.append(result)
        if on_result is not None:
            on_result(result)
    n = len(scenarios)
    by_seed = {
        seed: score_suite(results[i * n : (i + 1) * n], enabled_kinds or rule_kinds(), thresholds)
        for i, seed in enumerate(seeds)
    }
    wall_s = time.perf_counter() - started
    if len(seeds) == 1:
        by_seed[seeds[0]].wall_s = wall_s
    return SeedsReport(by_seed, thresholds, wall_s)


def score_suite(
    results: list[ScenarioResult], enabled_kinds: frozenset[str], thresholds: Thresholds
) -> SuiteReport:
    """Scenario results pooled per kind, checked against the thresholds, failures traced to labels."""
    kinds, total = _aggregate(results, enabled_kinds, thresholds)
    failures = _failures(results, kinds, total)
    return SuiteReport(results, kinds, total, thresholds, failures, sum(r.wall_s for r in results))


def parse_seeds(text: str) -> list[int]:
    """``1-5``, ``1,3,7`` or ``1-3,9`` as the seeds, in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            raise ValueError(f"seeds {text!r}: {part.strip()!r} is not a seed or a range like 1-5") from None
        if last < first:
            raise ValueError(f"seeds {text!r}: range {part.strip()!r} ends before it starts")
        seeds.extend(s for s in range(first, last + 1) if s not in seeds)
    return seeds


def _run_all(jobs: list[_Job], workers: int) -> Iterator[ScenarioResult]:
    if workers <= 1 or len(jobs) <= 1:
        yield from (_run_one(job) for job in jobs)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)))
    try:
        yield from pool.map(_run_one, jobs)
    finally:
        pool.shutdown(cancel_futures=True)  # after a crash, do not run the scenarios still queued


def _run_one(job: _Job) -> ScenarioResult:
    """Simulate into a temporary trace (deleted at once: the big ones take hundreds of MB) and replay."""
    path, scenario, config, seed, factory, thresholds = job
    with tempfile.TemporaryDirectory(prefix="fabricwatch-eval-") as tmp:
        trace = Path(tmp) / "run.trace"
        try:
            simulate(scenario, trace, seed=seed)
            replayed = replay_trace(trace, factory(config))
            delivered = _delivered(trace)
        except Exception as exc:  # a crash must name the scenario that caused it
            raise ScenarioRunError(f"{path}: {type(exc).__name__}: {exc}") from exc
    poll_s = float(replayed.meta.get("poll_interval_s", scenario.poll_interval))
    duration_s = float(replayed.meta.get("duration_s", replayed.duration_s))
    labels = replayed.pipeline.labels
    faults = [lb for lb in labels if lb.kind != "benign"]
    score = _Scorer(replayed.anomalies, poll_s, duration_s, scenario.start_ns, delivered)
    return ScenarioResult(
        path=str(path),
        name=path.name,
        seed=int(replayed.meta.get("seed", scenario.seed)),
        hosts=int(replayed.meta.get("hosts", 0)),
        poll_s=poll_s,
        duration_s=duration_s,
        benign_only=not faults,
        wall_s=replayed.wall_s,
        kinds=score.kind_counts(labels),
        labels=[
            score.label(lb, thresholds.delay_bound_s(lb.kind, poll_s, config, lb.severity), faults)
            for lb in faults
        ],
        false_alerts=score.false_alerts(faults),
    )


def _delivered(trace: Path) -> dict[str, np.ndarray]:
    """Each device's delivery times of new readings in the trace, sorted. A snapshot that repeats
    its device's last values (a read between two refreshes of a switch's counters) brings nothing
    new, so no detector can act on it: it counts as a poll not delivered. The payloads are not
    decoded: a snapshot's values follow its timestamp, so equal bytes from ``"values":`` on are a
    repeat."""
    times: dict[str, list[int]] = {}
    last: dict[str, bytes] = {}
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic != topics.COUNTERS or rec.key is None:
                continue
            payload = rec.value()
            values = payload[payload.find(b'"values":') :]
            if last.get(rec.key) == values:
                continue
            last[rec.key] = values
            times.setdefault(rec.key, []).append(rec.ts_ns)
    return {device: np.sort(np.array(ts, dtype=np.int64)) for device, ts in times.items()}


def missed_polls(times: np.ndarray | None, start_ns: int, bound_s: float, poll_s: float) -> int:
    """Polls of a device that never arrived between ``start_ns`` and the delay bound, the bound
    growing by a poll for each: a detector cannot see a poll that was not delivered, and persistence
    needs two readings, so a gap right after a fault starts delays any honest detector by a poll.
    Gaps are read off the delivery times: a gap of about k polls misses k - 1; before the first
    delivery after the start, the previous poll is taken as half a poll before it."""
    if times is None or times.size == 0:
        return 0
    poll_ns = poll_s * 1e9
    i = int(np.searchsorted(times, start_ns, side="right"))
    missed, previous = 0, start_ns - poll_ns / 2
    while i < times.size and previous < start_ns + bound_s * 1e9 + missed * poll_ns:
        missed += max(0, round((times[i] - previous) / poll_ns) - 1)
        previous = times[i]
        i += 1
    return missed


class _Scorer:
    """One scenario's anomalies scored whole, per label and per incident, all by ``evaluate``."""

    def __init__(
        self,
        anomalies: list[Anomaly],
        poll_s: float,
        duration_s: float,
        t0_ns: int,
        delivered: dict[str, np.ndarray],
    ) -> None:
        self.anomalies, self.poll_s, self.duration_s, self.t0_ns = anomalies, poll_s, duration_s, t0_ns
        self.delivered = delivered
        self.incidents = incidents_of(anomalies)

    def _eval(self, anomalies: list[Anomaly], labels: list[Label]) -> Evaluation:
        return evaluate(anomalies, labels, self.poll_s, self.duration_s)

    def kind_counts(self, labels: list[Label]) -> dict[str, Counts]:
        return {kind: s.counts() for kind, s in self._eval(self.anomalies, labels).kinds.items()}

    def label(self, lb: Label, bound_s: float | None, labels: list[Label]) -> LabelResult:
        """``lb`` scored alone, among the ``labels`` of its trace."""
        s = evaluate(self.anomalies, [lb], self.poll_s, self.duration_s, labels).kinds[lb.kind]
        hits = [
            i
            for i in self.incidents
            if evaluate([_probe(i)], [lb], self.poll_s, self.duration_s, labels).kinds[lb.kind].detected
        ]
        delay = s.delays_s[0] if s.delays_s else None
        missed = 0
        if bound_s is not None:
            missed = missed_polls(self.delivered.get(lb.root.device), lb.start_ns, bound_s, self.poll_s)
            bound_s += missed * self.poll_s
        return LabelResult(
            kind=lb.kind,
            start_s=self._s(lb.start_ns),
            end_s=self._s(lb.end_ns),
            root=root_text(lb.root),
            detected=bool(s.detected),
            localised=bool(s.localised),
            found_roots=sorted({root_text(i.root) for i in hits}),
            duplicates=s.duplicates,
            delay_s=delay,
            delay_polls=None if delay is None else delay / self.poll_s,
            delay_bound_s=bound_s,
            missed_polls=missed,
        )

    def false_alerts(self, faults: list[Label]) -> list[FalseAlert]:
        return [
            FalseAlert(
                i.kind, root_text(i.root), self._s(i.start_ns), self._s(i.first_alert_ns), self._s(i.end_ns)
            )
            for i in self.incidents
            if self._eval([_probe(i)], faults).false_alerts
        ]

    def _s(self, ts_ns: int) -> float:
        return round((ts_ns - self.t0_ns) / 1e9, 3)


def _probe(inc: Incident) -> Anomaly:
    """A one-event stand-in for an incident, so ``evaluate`` can judge that incident alone."""
    return Anomaly(
        fingerprint=inc.fingerprint,
        kind=inc.kind,  # type: ignore[arg-type]
        severity="warning",
        status="firing",
        start_ns=inc.start_ns,
        ts_ns=inc.first_alert_ns,
        root=inc.root,
        summary="",
        end_ns=inc.end_ns,
    )


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
