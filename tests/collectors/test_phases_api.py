"""The job-side API, `import fabricwatch.phases`: marks become phases (a few messages, not one per
call), the training loop never waits (a full queue drops and counts, a broker that is away costs
only the marking thread), and the marks reach a real broker (Tansu)."""

from __future__ import annotations

import socket
import time

import pytest
from helpers.streaming import Collector
from helpers.waiting import wait_for

import fabricwatch.phases as phases
from fabricwatch.collectors import job_marks
from fabricwatch.local.broker import free_port
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Phase, PhaseMessage, Steps, decode
from fabricwatch.schemas.trace import TraceReader


@pytest.fixture(autouse=True)
def stopped():
    yield
    phases.stop()


def test_marks_become_phases_of_this_rank(tmp_path):
    out = tmp_path / "marks.trace"
    phases.start(job="llama-8b", out=str(out), rank=3, interval_s=0.05)
    for _ in range(3000):
        phases.collective("AllReduce", nbytes=1024, comm="dp")
    for _ in range(100):
        phases.collective("AllGather", nbytes=4096, comm="tp")
    stats = phases.stop()
    assert (stats.marked, stats.dropped) == (3100, 0)
    with TraceReader(out) as reader:
        got = [decode(r.value(), Phase) for r in reader]
    assert stats.phases == len(got) and len(got) <= 6, "a few messages, not one per call"
    host = socket.gethostname()
    assert {(p.job, p.op, p.comm) for p in got} == {
        ("llama-8b", "AllReduce", "dp"),
        ("llama-8b", "AllGather", "tp"),
    }
    assert all(p.rank_hosts == {3: host} for p in got)
    assert sum(p.bytes for p in got if p.op == "AllReduce") == 3000 * 1024


def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path, monkeypatch):
    monkeypatch.setattr(job_marks, "QUEUE_MAX", 10)
    phases.start(job="j", out=str(tmp_path / "m.trace"), interval_s=60)  # the thread does not drain
    for _ in range(100):
        phases.collective("AllReduce")
    stats = phases.stats()
    assert (stats.marked, stats.dropped) == (10, 90)


def test_a_broker_that_is_away_costs_the_loop_nothing():
    closed = free_port()  # nothing listens here
    phases.start(job="j", broker=f"127.0.0.1:{closed}", interval_s=0.05)
    began = time.perf_counter()
    for _ in range(100_000):
        phases.collective("AllReduce", nbytes=8, comm="dp")
    loop_s = time.perf_counter() - began
    assert loop_s < 2.0, f"100,000 marks took {loop_s:.2f} s"
    assert wait_for(lambda: phases.stats().lost > 0 or phases.stats().last_error, 60)
    stats = phases.stop()
    assert stats.dropped == 0 and stats.phases == 0 and stats.last_error


def test_a_bad_collective_name_is_an_error_at_the_mark():
    phases.start(job="j", out="/dev/null", interval_s=60)
    with pytest.raises(ValueError, match="AllReduce"):
        phases.collective("all_reduce")


@pytest.mark.processes
def test_marks_reach_the_broker(broker):
    seen = Collector(broker, topics.PHASES)
    phases.start(job="moe", broker=broker.bootstrap, interval_s=0.05, gap_s=0.1)
    for _ in range(500):
        phases.collective("AllToAll", nbytes=256, comm="ep")
    stats = phases.stop()  # sends what is open
    assert wait_for(lambda: len(seen.records) >= stats.phases >= 1, 30)
    got = [decode(r.value, Phase) for r in seen.stop()]
    assert {(p.job, p.op) for p in got} == {("moe", "AllToAll")}
    assert stats.lost == 0


def test_steps_marked_between_collectives_are_carried_by_the_phases_that_begin_in_them(tmp_path):
    """A step lasting longer than the gap that ends a phase: each step's AllReduce is its own phase,
    and carries the step it began in (an incident it explains names the step)."""
    out = tmp_path / "steps.trace"
    phases.start(job="llama-8b", out=str(out), rank=0, interval_s=0.02, gap_s=0.05)
    for n in (7, None):  # None: the step after the last one marked
        phases.step(n)
        for _ in range(50):
            phases.collective("AllReduce", nbytes=1024, comm="dp")
        time.sleep(0.3)  # the behaviour under test: a step outlasting the gap that ends a phase
    stats = phases.stop()
    assert stats.marked == 102 and stats.dropped == 0
    with TraceReader(out) as reader:
        got = [decode(r.value(), PhaseMessage) for r in reader]
    phased = [m for m in got if isinstance(m, Phase)]
    assert [p.step for p in sorted(phased, key=lambda p: p.begin_ns)] == [7, 8]
    # Step 7 ended when step 8 was marked: its time is the gap between the marks. Step 8 has no
    # end yet, so no time: nothing is made up for it.
    (steps,) = [m for m in got if isinstance(m, Steps)]
    (step,) = steps.steps
    assert (step.step, step.rank, step.coll_ns, step.exposed_ns) == (7, 0, None, None)
    assert steps.rank_hosts == {0: socket.gethostname()} and 0.3 <= step.dur_ns / 1e9 < 1.0
