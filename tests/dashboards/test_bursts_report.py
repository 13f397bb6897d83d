"""Issue 36, item 2: the report ranks the switch ports whose queues burst between reads, from their
microburst findings as the store keeps them, with the job whose All-to-All made them."""

from __future__ import annotations

import pytest
from helpers.replayed_store import an_hour_ago, trace_into_store

from fabricwatch.dashboards.report import write_report
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.storage import headroom, queries

pytestmark = pytest.mark.slow  # a simulated scenario replayed into chdb

OPEN_BOUND_S = 300 + 0.9 * 60 + 10 + 1 + DetectorConfig().incidents.resolve_after_s
"""From the first burst to the resolution: 300 s of bursts, then the window's share halving (54 s),
judged at a bucket's close, a poll, and stage 2's wait before it resolves."""

SCENARIO = """\
name: bursts
seed: 36
duration: 400
poll_interval: 1.0
fabric: {leaves: 2, spines: 4, hosts_per_leaf: 8}
collector: {noise: 0.03, jitter_ms: 10}
jobs:
  - name: dp
    hosts: [h008, h009, h010, h011, h012, h013, h014, h015]
    schedule:
      - {op: AllReduce, begin: 0, end: 400, load: 0.3}
faults:
  - {kind: absorbed_burst, job: moe, receiver: h002, senders: 5, load: 0.3, start: 30.2, duration: 300,
     burst: {duration: 0.02, period: 0.2}}
  - {kind: absorbed_burst, job: once, receiver: h012, senders: 5, load: 0.3, start: 200.4, duration: 0.05}
"""


def test_a_queue_that_bursts_for_minutes_tops_the_burst_ranking_with_its_job(tmp_path):
    path = tmp_path / "bursts.yaml"
    path.write_text(SCENARIO)
    trace = tmp_path / "bursts.trace.gz"
    simulate(load_scenario(path, {"start_time": an_hour_ago()}), trace)
    store, result = trace_into_store(trace, tmp_path)
    try:
        lo, hi = queries.time_range(store, "rates_raw", None, None)
        ranking = headroom.burst_ranking(store, lo, hi)
        write_report(store, tmp_path / "report", max_ports=1, size_px=(800, 900), on_chart=lambda _: None)
    finally:
        store.close()
    found = {(a.root.device, a.root.port) for a in result.anomalies if a.kind == "microbursts"}
    assert found == {("leaf00", "Ethernet16")}, "h002's leaf port, and not the single burst's"
    (top,) = ranking
    assert (top.device, top.port, top.findings, top.jobs) == ("leaf00", "Ethernet16", 1, ("moe",))
    assert 300 <= top.open_s <= OPEN_BOUND_S and top.share > 0.95 and top.peak_bytes > 150_000
    index = (tmp_path / "report" / "index.html").read_text()
    assert "<h2>Microbursts</h2>" in index and "<td>leaf00 Ethernet16</td>" in index
