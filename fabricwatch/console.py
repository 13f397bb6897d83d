"""What replay prints for a person: anomalies as they happen, an incident table, the scores."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TextIO

from detectors.evaluation import Evaluation, incidents_of
from schemas.messages import Anomaly

_NS = 1e9


def clock(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / _NS, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def root_text(a: Anomaly) -> str:
    r = a.root
    where = r.group or ":".join(x for x in (r.device, r.port) if x)
    return f"{where} prio {r.priority}" if r.priority is not None else where


def print_event(a: Anomaly, out: TextIO) -> None:
    print(f"{clock(a.ts_ns)}  {a.status.upper():8} {a.severity:8} {a.kind:13} {root_text(a)}", file=out)
    if a.status != "resolved":
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
