"""Issue 36, item 1: the report ranks the switch ports by headroom, from the minute rollup, and the
links a heavy job runs hot for minutes are at its top, with their capacity findings."""

from __future__ import annotations

import pytest
from helpers.replayed_store import an_hour_ago, trace_into_store

from fabricwatch.dashboards.report import write_report
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.storage import headroom, queries

pytestmark = pytest.mark.slow  # a simulated scenario replayed into chdb

SCENARIO = """\
name: hot_links
seed: 36
duration: 600
poll_interval: 1.0
fabric: {leaves: 2, spines: 4, hosts_per_leaf: 8}
collector: {noise: 0.03, jitter_ms: 10}
jobs:
  - name: light
    hosts: [h008, h009, h010, h011, h012, h013, h014, h015]
    schedule:
      - {op: AllReduce, begin: 0, end: 600, load: 0.3}
faults:
  - {kind: balanced_allreduce, job: heavy, hosts: [h000, h001, h002, h003], load: 0.9,
     start: 60, duration: 480}
"""


def test_the_ports_a_heavy_job_runs_hot_top_the_headroom_ranking_with_their_findings(tmp_path):
    path = tmp_path / "hot_links.yaml"
    path.write_text(SCENARIO)
    trace = tmp_path / "hot_links.trace.gz"
    simulate(load_scenario(path, {"start_time": an_hour_ago()}), trace)
    store, result = trace_into_store(trace, tmp_path)
    try:
        lo, hi = queries.time_range(store, "rates_raw", None, None)
        ranking = headroom.capacity_ranking(store, lo, hi, limit=6)
        groups = headroom.group_headroom(store, lo, hi)
        write_report(store, tmp_path / "report", max_ports=1, size_px=(800, 900), on_chart=lambda _: None)
    finally:
        store.close()
    hot = {(h.device, h.port) for h in ranking[:4]}
    assert hot == {("leaf00", p) for p in ("Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24")}
    for h in ranking[:4]:
        assert h.p99 == pytest.approx(0.9, abs=0.05) and 6 <= h.hot_minutes <= 9
        assert h.mean < h.p99, "idle before and after the job: the mean over the range is lower"
    assert all(h.p99 < 0.8 for h in ranking[4:])
    # The heavy job stays on its leaf: the uplinks carry the light one's share, far from hot.
    assert {(g.device, g.port) for g in groups} == {
        ("leaf00", "leaf00/uplinks"),
        ("leaf01", "leaf01/uplinks"),
    }
    assert all(g.p99 < 0.6 and g.hot_minutes == 0 for g in groups)
    found = {(a.root.device, a.root.port) for a in result.anomalies if a.kind == "capacity"}
    assert found == hot
    index = (tmp_path / "report" / "index.html").read_text()
    assert "<h2>Capacity</h2>" in index and "leaf00 Ethernet0" in index
    assert "<td>uplink group</td><td>leaf00 leaf00/uplinks</td>" in index
