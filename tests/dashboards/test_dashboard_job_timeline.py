"""The job-timeline dashboard on the demo's store plus one job whose NCCL INIT lines were read (the
real nccl-tests#350 log and its peer's mirror image) and the NCCL Inspector README's two timed
records; ``test_dashboards.py`` checks it on the demo alone, whose simulated jobs publish graphs
made from their flows."""

from __future__ import annotations

import pytest
from helpers.comm_graphs import stored_gather
from helpers.dashboard_queries import (
    DASHBOARDS,
    INTERVAL_S,
    queries,
    resolve_variables,
    run_panel,
    stored_span,
)
from helpers.job_records import inspector_example_calls, kineto_example_steps
from helpers.replayed_store import replay_into_store

from fabricwatch.dashboards.macros import QueryContext, expand
from fabricwatch.schemas.messages import Periods
from fabricwatch.storage.queries import host_pairs_sql
from fabricwatch.storage.sink import Sink

pytestmark = pytest.mark.slow  # a replayed store in embedded ClickHouse
UID = "fw-job-timeline"
S = 1_000_000_000
STEP_BUCKET_NS = int(INTERVAL_S * 1e9)
"""The example's steps begin on an interval's edge, so its three steps (0.67 s) fall in one."""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    filled, _ = replay_into_store("demo", tmp_path_factory.mktemp("job-timeline"))
    lo = int(filled.query("SELECT min(begin_ns) FROM phases")[0][0])
    with Sink(filled) as sink:
        for msg in stored_gather(lo):
            sink.add(msg)
        for msg in inspector_example_calls("inspector-example", lo):
            sink.add(msg)
        sink.add(kineto_example_steps("ddp-example", -(-lo // STEP_BUCKET_NS) * STEP_BUCKET_NS))
        sink.add(moe_b_periods(filled, lo))
    yield filled
    filled.close()


def moe_b_periods(store, lo: int) -> Periods:
    """What a stage-1 worker would publish had moe-b's NICs repeated every 4 s for a minute (the
    demo's three minutes are too short for the rhythm detector's window)."""
    nics = [
        r[0]
        for r in store.query(
            "SELECT DISTINCT nic FROM topology_nics WHERE host IN "
            "(SELECT DISTINCT arrayJoin(hosts) FROM phases WHERE job = 'moe-b') ORDER BY nic"
        )
    ]
    times = [lo + 30 * S * (k + 1) for k in range(2) for _ in nics]
    n = len(times)
    return Periods(nics * 2, times, [4.0] * n, [0.8] * n, [4.0] * n, [1e9] * n)


def test_every_panel_has_rows_with_all_jobs_selected(store):
    span = stored_span(store)
    chosen, options = resolve_variables(store, DASHBOARDS[UID], span, pick_all=True)
    assert "gather" in options["job"] and "moe-b" in options["job"]
    ctx = QueryContext(*span, INTERVAL_S, chosen, options)
    empty = [title for title, sql in queries(DASHBOARDS[UID]) if not store.query(expand(sql, ctx))]
    assert not empty, f"no rows from {empty}"


def test_the_host_pairs_are_the_graph_s_counted_once_as_the_report_counts_them(store):
    rows = run_panel(store, stored_span(store), UID, _title("Host pairs"), job=["gather"])
    assert rows == [("gather", "n013", "n014", 2), ("gather", "n014", "n013", 4)]
    (panel,) = [p for p in DASHBOARDS[UID]["panels"] if p["title"] == _title("Host pairs")]
    assert panel["targets"][0]["rawSql"] == host_pairs_sql("$__conditionalAll(job IN ($job), $job)").strip()


def test_the_incast_job_s_ports_include_the_victim_port_and_its_reduce_runs(store):
    span = stored_span(store)
    ports = run_panel(store, span, UID, _title("Utilisation"), job=["moe-b"])
    assert "leaf01:Ethernet8" in {r[1] for r in ports}, "the incast's root faces a host of moe-b"
    running = run_panel(store, span, UID, _title("Collectives"), job=["moe-b"])
    assert any(r[1].startswith("moe-b Reduce ") and r[2] == 1 for r in running)


def test_the_call_panels_give_the_inspector_s_own_bandwidths_and_times(store):
    """Issue 35: bus bandwidth and call time as the job's records give them (the Inspector computed
    485.119099 and 366.134533 GB/s for its README's two calls: one rank's record each)."""
    span = stored_span(store)
    bw = run_panel(store, span, UID, _title("Bus bandwidth"), job=["inspector-example"])
    assert {r[1]: round(r[2], 6) for r in bw} == {
        "inspector-example AllReduce 16.00 GiB": 485.119099,
        "inspector-example ReduceScatter 2.00 GiB": 366.134533,
    }
    times = run_panel(store, span, UID, _title("Time of"), job=["inspector-example"])
    assert {r[1]: (r[2], r[3]) for r in times} == {
        "inspector-example AllReduce 16.00 GiB": (61.974, 61.974),
        "inspector-example ReduceScatter 2.00 GiB": (41.057, 41.057),
    }


def test_the_step_panels_give_a_real_trace_s_step_time_and_share_in_collectives(store):
    """Issue 35: a real DDP trace's three steps (222.4, 219.7 and 224.9 ms, 5.39, 5.60 and 10.04 %
    in collectives, of which 5.39, 5.59 and 10.02 % not hidden behind compute): the medians."""
    span = stored_span(store)
    (times,) = run_panel(store, span, UID, _title("Step time"), job=["ddp-example"])
    assert times[1:] == ("ddp-example", pytest.approx(222.442191), pytest.approx(224.936243, rel=1e-3))
    (share,) = run_panel(store, span, UID, _title("Share of a step"), job=["ddp-example"])
    assert share[1:] == ("ddp-example", pytest.approx(5.5979, abs=1e-4), pytest.approx(5.5899, abs=1e-4))


def _title(prefix: str) -> str:
    (title,) = [p["title"] for p in DASHBOARDS[UID]["panels"] if p["title"].startswith(prefix)]
    return title
