"""The capacity dashboard on a store filled by replaying a scenario with links a heavy job runs hot
and a queue that bursts between reads (the demo's five minutes hold neither a hot window nor a
minute of bursts): every panel has rows, and each names the ports that did it."""

from __future__ import annotations

import msgspec
import pytest
from helpers.dashboard_queries import DASHBOARDS, INTERVAL_S, resolve_variables, run_panel, stored_span
from helpers.replayed_store import an_hour_ago, trace_into_store

from fabricwatch.dashboards.macros import QueryContext, expand
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.ingest.nic.burst import capture, profile
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas.messages import BurstProfile
from fabricwatch.storage.captures import ASKED_BY_SQL, WHY_SQL
from fabricwatch.storage.sink import Sink

pytestmark = pytest.mark.slow  # a simulated scenario replayed into chdb

OPEN_BOUND_S = 300 + 0.9 * 60 + 10 + 1 + DetectorConfig().incidents.resolve_after_s
"""From the first burst to the resolution: 300 s of bursts, then the window's share halving (54 s),
judged at a bucket's close, a poll, and stage 2's wait before it resolves."""

UID = "fw-capacity"
SCENARIO = """\
name: capacity_dashboard
seed: 37
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
  - {kind: balanced_allreduce, job: heavy, hosts: [h000, h001, h002, h003], load: 0.9, start: 60,
     duration: 480}
  - {kind: absorbed_burst, job: moe, receiver: h006, senders: 5, load: 0.3, start: 100.2, duration: 300,
     burst: {duration: 0.02, period: 0.2}}
"""
HOT = {("leaf00", p) for p in ("Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24")}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("capacity-dashboard")
    path = tmp / "scenario.yaml"
    path.write_text(SCENARIO)
    simulate(load_scenario(path, {"start_time": an_hour_ago()}), tmp / "trace.gz")
    filled, _ = trace_into_store(tmp / "trace.gz", tmp)
    with Sink(filled) as sink:
        sink.add(capture_for_the_burst_finding(filled))
    yield filled
    filled.close()


def capture_for_the_burst_finding(store) -> BurstProfile:
    """A real capture (of this machine's loopback) as the host behind the bursting port would have
    published it when the microburst finding opened (``collect burst --on-incident``)."""
    ((fingerprint, start_ns),) = store.query(
        "SELECT fingerprint, min(start_ns) FROM anomalies_latest "
        "WHERE kind = 'microbursts' GROUP BY fingerprint"
    )
    taken = profile(capture("lo", 0.001, 0.1), 100e9 / 8, 0.001)
    return msgspec.structs.replace(taken, start_ns=int(start_ns) + 10**9, host="h006", trigger=fingerprint)


def panel(store, title_start: str) -> list[tuple]:
    title = next(p["title"] for p in DASHBOARDS[UID]["panels"] if p["title"].startswith(title_start))
    return run_panel(store, stored_span(store), UID, title)


@pytest.mark.parametrize("pick_all", [True, False])
def test_every_panel_has_rows_and_the_variables_list_the_switches(store, pick_all):
    dash = DASHBOARDS[UID]
    span = stored_span(store)
    chosen, options = resolve_variables(store, dash, span, pick_all=pick_all)
    assert options["device"] == ["leaf00", "leaf01", "spine00", "spine01", "spine02", "spine03"]
    ctx = QueryContext(*span, INTERVAL_S, chosen, options)
    for p in dash["panels"]:
        assert store.query(expand(p["targets"][0]["rawSql"], ctx)), p["title"]


def test_the_hot_ports_top_the_headroom_table_and_their_series(store):
    ranked = panel(store, "Headroom")
    assert {(r[0], r[1]) for r in ranked[:4]} == HOT
    for _, _, mean, p99, peak, hot_minutes in ranked[:4]:
        assert p99 == pytest.approx(0.9, abs=0.05) and mean < p99 <= peak and 6 <= hot_minutes <= 9
    shown = {r[1] for r in panel(store, "Utilisation of the ten ports")}
    assert {f"{d}:{p}" for d, p in HOT} <= shown
    bands = {(r[0], r[1]): r[2:6] for r in panel(store, "Minutes per utilisation band")}
    assert set(bands) == HOT, "only the ports that ran hot"
    for below, _in_band, hot, full in bands.values():
        assert 6 <= hot + full <= 9 and below >= 1  # the job's 8 minutes; idle before and after


def test_the_bursting_queue_and_both_kinds_of_finding(store):
    (bursting,) = panel(store, "Microbursts per port")
    device, port, findings, open_s, most, peak, jobs = bursting
    assert (device, port, findings, list(jobs)) == ("leaf00", "Ethernet48", 1, ["moe"])
    assert 300 <= open_s <= OPEN_BOUND_S and most > 0.95 and peak > 150_000
    found = {(r[0], r[1], r[2]) for r in panel(store, "Capacity and microburst findings")}
    assert found == {("leaf00", p, "capacity") for _, p in HOT} | {("leaf00", "Ethernet48", "microbursts")}


def test_the_capture_the_finding_asked_for_is_listed_with_it(store):
    """Issue 36, item 3: the dashboard shows a burst capture beside the poll-rate view, naming the
    incident that asked for it as the report does (the same join)."""
    ((_, host, netdev, asked, *_),) = panel(store, "Burst captures")
    assert (host, netdev, asked) == ("h006", "lo", "microbursts at leaf00 Ethernet48")
    (p,) = [p for p in DASHBOARDS[UID]["panels"] if p["title"].startswith("Burst captures")]
    assert ASKED_BY_SQL in p["targets"][0]["rawSql"] and WHY_SQL in p["targets"][0]["rawSql"]
