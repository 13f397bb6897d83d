"""One set of numbers everywhere: for every incident of the demo, the console's last line, the last
anomaly message, the store and the report say the same thing (found: peak queue 2551 KB on the
console, 2341 KB in the report; 12 storm ports on the last UPDATED line, 13 in the report)."""

from __future__ import annotations

import html
import io
import re

import pytest
from helpers.replayed_store import replay_into_store

from fabricwatch import console
from fabricwatch.dashboards.report import write_report

pytestmark = pytest.mark.slow  # a replayed store in embedded ClickHouse


def test_console_messages_store_and_report_give_each_incident_the_same_numbers(tmp_path):
    store, result = replay_into_store("demo", tmp_path)
    try:
        out = io.StringIO()
        for a in result.anomalies:
            console.print_event(a, out)
        stored = dict(
            store.query("SELECT fingerprint, argMax(summary, ts_ns) FROM anomaly_events GROUP BY fingerprint")
        )
        index = write_report(store, tmp_path / "report")[-1].read_text()
    finally:
        store.close()

    latest = {a.fingerprint: a for a in sorted(result.anomalies, key=lambda a: a.ts_ns)}
    assert {a.kind for a in latest.values()} >= {"incast", "pfc_storm", "ecmp_collapse"}
    printed = out.getvalue().splitlines()
    for fingerprint, final in latest.items():
        heading = [
            i for i, line in enumerate(printed) if console.root_text(final) in line and final.kind in line
        ]
        assert printed[heading[-1] + 1].strip() == final.summary  # the console's last word on it
        assert stored[fingerprint] == final.summary  # the store's
        assert f"<td>{html.escape(final.summary)}</td>" in index  # the report's
    incast = next(a for a in latest.values() if a.kind == "incast")
    peaks = [int(m) for m in re.findall(r"peak queue (\d+) KB", "\n".join(printed))]
    assert peaks == sorted(peaks) and f"peak queue {peaks[-1]} KB" in incast.summary  # a peak only grows
    storm = next(a for a in latest.values() if a.kind == "pfc_storm")
    assert storm.jobs and f"job {storm.jobs[0]}" in storm.summary  # the line names the job the table does
