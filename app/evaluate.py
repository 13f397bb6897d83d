"""Score the detectors on a suite of labelled scenarios: what ``fabricwatch evaluate`` runs.

One scenario alone says little (a handful of labels, a few simulated minutes), so the scores that
matter are pooled per kind across the whole suite and checked against the acceptance thresholds.
Matching a label to incidents is ``detectors.evaluation.evaluate``'s job and is never re-implemented
here: per-label and per-incident details come from calling it on one label or one incident at a time.

Scenarios are independent, so they run in worker processes; results come back in argument order,
and everything but the wall times is the same for the same files, seed and configuration.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.evaluation import Counts, Evaluation, Incident, evaluate, incidents_of
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.registry import REGISTRY
from fabricwatch.ingest.simulator import Scenario, load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, Label
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.suite_report import (
    FalseAlert,
    LabelResult,
    ScenarioResult,
    SeedsReport,
    SuiteReport,
    Thresholds,
    root_text,
    score_suite,
)


def rule_kinds() -> frozenset[str]:
    """Kinds whose detector always runs; those that need a learned model (``outlier``) join them
    only when one is loaded (``REGISTRY.kinds(needs_model=True)``)."""
    return REGISTRY.kinds(needs_model=False)


PipelineFactory = Callable[[DetectorConfig], Pipeline]
"""Builds the pipeline for one scenario; must be picklable (a module-level function or a
``functools.partial`` of one) because scenarios run in worker processes."""


class ScenarioRunError(ValueError):
    """A scenario that validated but could not be simulated or replayed (a bug, not a score)."""


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
        seed: score_suite(
            results[i * n : (i + 1) * n], rule_kinds() if enabled_kinds is None else enabled_kinds, thresholds
        )
        for i, seed in enumerate(seeds)
    }
    wall_s = time.perf_counter() - started
    if len(seeds) == 1:
        by_seed[seeds[0]].wall_s = wall_s
    return SeedsReport(by_seed, thresholds, wall_s)


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
        kind=inc.kind,
        severity="warning",
        status="firing",
        start_ns=inc.start_ns,
        ts_ns=inc.first_alert_ns,
        root=inc.root,
        summary="",
        end_ns=inc.end_ns,
        caused_by=inc.caused_by,
    )
