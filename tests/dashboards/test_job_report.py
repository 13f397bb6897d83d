"""Issue 35: the report draws a job's timed calls beside its ports, and says what each fabric
incident cost the jobs it names, from the calls the store holds."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.job_records import kineto_example_steps
from helpers.job_scenarios import job_trace
from helpers.replayed_store import an_hour_ago, trace_into_store

from fabricwatch.dashboards.report import write_report
from fabricwatch.schemas import topics
from fabricwatch.schemas.bandwidth import bandwidths
from fabricwatch.schemas.messages import Collectives, Step, Steps, decode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.storage import queries
from fabricwatch.storage.sink import Sink

pytestmark = pytest.mark.slow  # a simulated scenario replayed into chdb

S = 1_000_000_000
SLOW_LINK = "  - {kind: speed_downshift, device: h006, factor: 0.5, start: 20, duration: 30}"


def busbw_by_hand(trace, job: str) -> tuple[np.ndarray, np.ndarray]:
    """Begin times and bus bandwidths of every rank's call of ``job`` in the trace, from the
    nccl-tests definitions (``schemas/bandwidth.py``)."""
    calls = []
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic == topics.PHASES:
                msg = decode(rec.value())
                if isinstance(msg, Collectives) and msg.job == job:
                    calls += [(c.op, c.bytes, msg.nranks, c.dur_ns, c.begin_ns) for c in msg.calls]
    ops, nbytes, nranks, dur, begin = (np.array(x) for x in zip(*calls, strict=True))
    return begin, bandwidths(ops, nbytes, nranks, dur)[1]


def test_a_slow_link_says_what_it_cost_the_job_and_the_report_draws_its_calls(tmp_path):
    trace = job_trace(tmp_path, "slow_link", SLOW_LINK, start_ns=an_hour_ago())
    store, _ = trace_into_store(trace, tmp_path)
    try:
        lo, hi = queries.time_range(store, "rates_raw", None, None)
        (link,) = [i for i in queries.incidents(store, lo, hi) if i.kind == "slow_link"]
        assert "llm-a" in link.jobs
        begin, busbw = busbw_by_hand(trace, "llm-a")
        during = np.median(busbw[(begin >= link.start_ns) & (begin <= link.end_ns)])
        before = np.median(busbw[(begin >= link.start_ns - 60 * S) & (begin < link.start_ns)])
        (cost,) = [c for c in queries.job_costs(store, link) if c.startswith("llm-a ")]
        said = re.fullmatch(r"llm-a AllReduce 256 MiB: bus bandwidth ([+-]\d+)% while open", cost)
        assert said, cost
        assert int(said[1]) == pytest.approx(100 * (during / before - 1), abs=1)
        assert int(said[1]) <= -20, "a link at half speed costs the job a fifth of its bandwidth at least"

        (series,) = queries.job_calls(store, "llm-a", lo, hi, 5 * S)
        assert (series.op, series.size_bucket, series.upper_bound) == ("AllReduce", 256 << 20, False)
        first = series.times[0].astype(np.int64)
        in_first = (begin >= first) & (begin < first + 5 * S)
        assert series.busbw[0] == pytest.approx(np.median(busbw[in_first]), rel=0.01)

        drawn = []
        write_report(store, tmp_path / "report", max_ports=2, size_px=(800, 900), on_chart=drawn.append)
    finally:
        store.close()
    assert any(p.name == "job-llm_a-timeline.png" for p in drawn)
    assert cost in (tmp_path / "report" / "index.html").read_text()


def test_the_report_says_each_jobs_step_time_and_share_in_collectives(tmp_path):
    """A job with a real trace's three steps (tests/fixtures/SOURCES.md) and one whose step()
    marks time its steps only: the median step time of each, the share in collectives of the
    first (5.6 %, 5.6 % exposed: the median step's), unknown for the second, never 0 %."""
    trace = job_trace(tmp_path, "steps", "", duration=30, start_ns=an_hour_ago())
    store, _ = trace_into_store(trace, tmp_path)
    try:
        lo, _ = queries.time_range(store, "rates_raw", None, None)
        t0 = lo + 5 * S
        api = [Step(n, 0, t0 + n * S, S) for n in range(3)]
        marked = Steps(job="moe-b", ts_ns=t0, steps=api, rank_hosts={0: "h004"}, source="api:h004")
        with Sink(store) as sink:
            sink.add(kineto_example_steps("llm-a", t0))
            sink.add(marked)
        write_report(store, tmp_path / "report", max_ports=1, size_px=(800, 900), on_chart=lambda _: None)
    finally:
        store.close()
    html = (tmp_path / "report" / "index.html").read_text()
    cell = r"<td>([^<]+)</td>"
    rows = re.findall(f"<tr>{cell * 3}<td>[^<]+</td>{cell * 2}</tr>", html)
    assert ("llm-a", "3 of 1 ranks", "222.4 ms", "5.6%", "5.6%") in rows
    assert ("moe-b", "3 of 1 ranks", "1000.0 ms", "unknown", "unknown") in rows
