"""What replay prints for a person: anomalies as they happen, an incident table, the scores."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TextIO

from fabricwatch.detectors.evaluation import Evaluation, incidents_of
from fabricwatch.detectors.registry import REGISTRY
from fabricwatch.schemas.messages import Anomaly
from fabricwatch.suite_report import (
    GATING_RULE,
    TOTAL,
    Failure,
    KindSummary,
    SeedsReport,
    SuiteReport,
    Thresholds,
    percentile,
)

_NS = 1e9


def clock(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / _NS, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def root_text(a: Anomaly) -> str:
    r = a.root
    where = r.group or ":".join(x for x in (r.device, r.port) if x)
    return f"{where} prio {r.priority}" if r.priority is not None else where


def print_event(a: Anomaly, out: TextIO) -> None:
    """One event: its time, state and root, then its summary (on RESOLVED too: the incident's final
    figures, the same ones the store and the report keep)."""
    print(f"{clock(a.ts_ns)}  {a.status.upper():8} {a.severity:8} {a.kind:13} {root_text(a)}", file=out)
    print(f"{'':14}{a.summary}", file=out)


def print_incidents(anomalies: list[Anomaly], out: TextIO) -> None:
    incidents = incidents_of(anomalies)
    latest = {a.fingerprint: a for a in sorted(anomalies, key=lambda a: a.ts_ns)}
    rows = [("start", "end", "kind", "severity", "root", "jobs / collectives")]
    for inc in sorted(incidents, key=lambda i: i.start_ns):
        a = latest[inc.fingerprint]
        jobs = ", ".join(a.jobs + a.collectives[:2]) or "-"
        rows.append((clock(inc.start_ns), clock(inc.end_ns), inc.kind, a.severity, root_text(a), jobs))
    _table(rows, out)


def print_evaluation(ev: Evaluation, out: TextIO) -> None:
    rows = [("kind", "labels", "incidents", "duplicates", "precision", "recall", "localised", "max delay s")]
    for kind in sorted(ev.kinds):
        s = ev.kinds[kind]
        rows.append(
            (
                kind,
                str(s.labels),
                str(s.incidents),
                str(s.duplicates),
                _num(s.precision),
                _num(s.recall),
                _num(s.localisation),
                _num(s.delay_max_s),
            )
        )
    _table(rows, out)
    print(f"false alerts: {ev.false_alerts} ({ev.false_alerts_per_hour:.2f} per simulated hour)", file=out)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _table(rows: list[tuple[str, ...]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def print_suite(report: SuiteReport, out: TextIO) -> None:
    """Scenario rows first (where to look), then the per-kind verdict the suite is judged on."""
    print("Scenarios", file=out)
    _table(_scenario_rows(report), out)
    print("\nPer kind (delays: max / p50 / p95; false alerts per hour on benign-only scenarios)", file=out)
    _table(_kind_rows(report), out)
    _print_rules(report.thresholds, out)
    _print_failures(report.failures, "", out)
    print("", file=out)
    for s in [*(report.kinds[k] for k in sorted(report.kinds)), report.total]:
        verdict = ("PASS" if s.passed else "FAIL") if s.gated else "not gated"
        print(f"{verdict:9} {s.kind}", file=out)
    print(f"{'PASS' if report.passed else 'FAIL':9} suite ({len(report.scenarios)} scenarios)", file=out)


def print_seeds(report: SeedsReport, out: TextIO) -> None:
    """Each kind under each seed, its mean and its worst seed; then what failed, seed by seed."""
    print("Per kind and seed (max delay in polls; false alerts per hour on benign-only scenarios)", file=out)
    _table(_seed_rows(report), out)
    _print_rules(report.thresholds, out)
    for seed, r in report.by_seed.items():
        _print_failures(r.failures, f" [seed {seed}]", out)
    print("", file=out)
    for kind in [*report.kinds(), TOTAL]:
        by_seed = report.kind_by_seed(kind)
        if not any(s.gated for s in by_seed.values()):
            print(f"{'not gated':9} {kind}", file=out)
            continue
        failed = [str(seed) for seed, s in by_seed.items() if s.gated and not s.passed]
        why = f"fails under seed {', '.join(failed)}" if failed else "passes under every seed"
        verdict = "FAIL" if failed else "PASS"
        print(f"{verdict:9} {kind} ({why}; worst seed {report.worst(kind)[0]})", file=out)
    n = len(next(iter(report.by_seed.values())).scenarios)
    verdict = "PASS" if report.passed else "FAIL"
    print(f"{verdict:9} suite ({n} scenarios x {len(report.by_seed)} seeds)", file=out)


def _seed_rows(report: SeedsReport) -> list[tuple[str, ...]]:
    """Per kind: a row per seed, the mean over seeds, then the worst seed's row again."""
    rows = [("kind", "seed", "labels", "incidents", "dup", "false", "precision", "recall", "localised",
             "max delay polls", "false/h", "verdict")]  # fmt: skip
    for kind in [*report.kinds(), TOTAL]:
        for seed, s in report.kind_by_seed(kind).items():
            rows.append((kind, str(seed), *_seed_cells(s)))
        mean = report.mean(kind)
        ratios = (
            ["-"] * 3 if kind == TOTAL else [_num(mean[r]) for r in ("precision", "recall", "localisation")]
        )
        rows.append((kind, "mean", "", "", "", "", *ratios, _num(mean["max_delay_polls"]),
                     _num(mean["false_alerts_per_hour"]), ""))  # fmt: skip
        seed, worst = report.worst(kind)
        rows.append((kind, f"worst: {seed}", *_seed_cells(worst)))
    return rows


def _seed_cells(s: KindSummary) -> tuple[str, ...]:
    c = s.counts
    verdict = ("PASS" if s.passed else "FAIL") if s.gated else "not gated"
    return (str(c.labels), str(c.incidents), str(c.duplicates), str(c.false_alerts), *_ratios(s),
            _num(max(s.delays_polls, default=None)), _num(s.false_alerts_per_hour), verdict)  # fmt: skip


def _ratios(s: KindSummary) -> tuple[str, str, str]:
    if s.kind == TOTAL:
        return ("-", "-", "-")
    return (_num(s.precision), _num(s.recall), _num(s.localisation))


def _print_rules(th: Thresholds, out: TextIO) -> None:
    delays = ", ".join(f"{k.name} {k.delay}" for k in REGISTRY.incidents.values() if k.delay)
    print(
        f"\nthresholds: precision >= {th.precision}, recall >= {th.recall}, localisation >= "
        f"{th.localisation}; delay <= {delays}, each + 1 poll per missing snapshot of the "
        f"root's device; <= {th.false_alerts_per_hour:g} false alert per benign hour\nrule: {GATING_RULE}",
        file=out,
    )


def _print_failures(failures: list[Failure], tag: str, out: TextIO) -> None:
    if failures:
        print(f"\nFailures{tag}", file=out)
        for f in failures:
            where = f" [{f.scenario}]" if f.scenario else ""
            print(f"  {f.kind} {f.check}{where}: {f.detail}", file=out)


def _scenario_rows(report: SuiteReport) -> list[tuple[str, ...]]:
    rows = [("scenario", "hosts", "poll s", "sim s", "faults", "found", "at root", "incidents", "false",
             "max delay polls", "wall s")]  # fmt: skip
    for r in report.scenarios:
        delays = [lb.delay_polls for lb in r.labels if lb.delay_polls is not None]
        rows.append(
            (
                r.name,
                str(r.hosts),
                f"{r.poll_s:g}",
                f"{r.duration_s:g}",
                str(len(r.labels)),
                str(sum(lb.detected for lb in r.labels)),
                str(sum(lb.localised for lb in r.labels)),
                str(sum(c.incidents for c in r.kinds.values())),
                str(len(r.false_alerts)),
                _num(max(delays, default=None)),
                f"{r.wall_s:.1f}",
            )
        )
    return rows


def _kind_rows(report: SuiteReport) -> list[tuple[str, ...]]:
    rows = [("kind", "gated", "labels", "incidents", "dup", "false", "precision", "recall", "localised",
             "delay s", "delay polls", "false/h")]  # fmt: skip
    for s in [*(report.kinds[k] for k in sorted(report.kinds)), report.total]:
        c = s.counts
        rows.append(
            (
                s.kind,
                "yes" if s.gated else "no",
                str(c.labels),
                str(c.incidents),
                str(c.duplicates),
                str(c.false_alerts),
                *(_num(x) if s is not report.total else "-" for x in (s.precision, s.recall, s.localisation)),
                _spread(s.delays_s),
                _spread(s.delays_polls),
                _num(s.false_alerts_per_hour),
            )
        )
    return rows


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return " / ".join(_num(x) for x in (max(values), percentile(values, 50), percentile(values, 95)))
