"""Issue 36, item 4: each job's period is stored over time, and where the job's records mark its
steps, the period read from the fabric alone agrees with their step time, before, while and after
its steps stretch. The report draws it and says so; the job-timeline dashboard reads the same."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.dashboard_queries import DASHBOARDS, run_panel, stored_span
from helpers.replayed_store import an_hour_ago, trace_into_store

from fabricwatch.dashboards.report import write_report
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.storage import queries
from fabricwatch.storage.job_rhythm import job_hosts_sql, job_rhythms

pytestmark = pytest.mark.slow  # a simulated scenario replayed into chdb

S = 1_000_000_000
STRETCH_S, STRETCH_END_S, FACTOR, END_S = 420, 780, 1.3, 1200
SCENARIO = f"""\
name: job_rhythm
seed: 361
duration: {END_S}
poll_interval: 1.0
fabric: {{leaves: 2, spines: 2, hosts_per_leaf: 8}}
collector: {{noise: 0.03, jitter_ms: 10}}
jobs:
  - name: llm-a
    hosts: 8
    schedule:
      - {{op: AllReduce, begin: 0, end: {END_S}, load: 0.6, steps: true,
         burst: {{duration: 1.5, period: 6.0}}}}
  - name: serve-c
    hosts: 8
    first_host: 8
    schedule:
      - {{op: AllGather, begin: 0, end: {END_S}, load: 0.3}}
faults:
  - {{kind: step_stretch, job: llm-a, factor: {FACTOR}, start: {STRETCH_S},
     duration: {STRETCH_END_S - STRETCH_S}}}
"""
UID = "fw-job-timeline"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("job-rhythm")
    path = tmp / "job_rhythm.yaml"
    path.write_text(SCENARIO)
    trace = tmp / "job_rhythm.trace.gz"
    simulate(load_scenario(path, {"start_time": an_hour_ago()}), trace)
    store, result = trace_into_store(trace, tmp)
    yield store, result, tmp
    store.close()


def test_the_period_the_fabric_shows_agrees_with_the_step_time_the_job_marks(replayed):
    store, result, _ = replayed
    lo, hi = queries.time_range(store, "rates_raw", None, None)
    (rhythm,) = job_rhythms(store, ["llm-a", "serve-c"], lo, hi, 30 * S)
    assert rhythm.job == "llm-a", "serve-c's steady traffic has no rhythm to store"
    assert rhythm.nics == 8
    at = (rhythm.times.astype(np.int64) - lo) / S
    step_at = (rhythm.step_times.astype(np.int64) - lo) / S
    window = 180  # the rhythm detector's window: a judgment reads the pace of the last 3 minutes
    for first, last, step in (
        (0, STRETCH_S, 6.0),
        (STRETCH_S + window, STRETCH_END_S, 6.0 * FACTOR),
        (STRETCH_END_S + window, END_S, 6.0),
    ):
        fabric = rhythm.period_s[(at >= first) & (at < last)]
        marked = rhythm.step_s[(step_at >= first) & (step_at < last)]
        assert len(fabric) >= 3 and len(marked) >= 3, (first, last)
        assert np.median(marked) == pytest.approx(step, rel=0.02), "the simulator marks each burst a step"
        assert np.median(fabric) == pytest.approx(np.median(marked), rel=0.05), (first, last, fabric)
    assert rhythm.agrees
    kinds = {a.kind for a in result.anomalies if a.status == "firing"}
    assert kinds == {"rhythm", "job_slowdown"}, "the stretch, seen by the fabric and by the job's steps"


def test_the_report_draws_each_job_s_period_and_says_it_agrees(replayed):
    store, _, tmp = replayed
    written = write_report(store, tmp / "report", max_ports=1, size_px=(800, 600), on_chart=lambda _: None)
    assert tmp / "report" / "rhythm.png" in written
    index = (tmp / "report" / "index.html").read_text()
    section = index[index.index("<h2>Rhythm</h2>") :]
    (row,) = [r for r in section.split("<tr>") if r.startswith("<td>llm-a</td>")]
    assert "<td>8</td>" in row and "6.00 s: agrees" in row
    assert "serve-c" not in section.split("</table>")[0]


def test_the_dashboard_reads_the_periods_the_report_reads(replayed):
    store, _, _ = replayed
    lo, hi = queries.time_range(store, "rates_raw", None, None)
    (rhythm,) = job_rhythms(store, ["llm-a"], lo, hi, 30 * S)
    title = next(p["title"] for p in DASHBOARDS[UID]["panels"] if p["title"].startswith("Rhythm of the jobs"))
    rows = run_panel(store, stored_span(store), UID, title, job=["llm-a"])
    assert {r[1] for r in rows} == {"llm-a"}
    assert np.median([r[2] for r in rows]) == pytest.approx(rhythm.median_s, rel=0.02)
    (panel,) = [p for p in DASHBOARDS[UID]["panels"] if p["title"] == title]
    assert job_hosts_sql("$__conditionalAll(job IN ($job), $job)") in panel["targets"][0]["rawSql"]
