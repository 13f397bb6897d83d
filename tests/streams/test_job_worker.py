"""The job stage as a worker runs it (issue 35): a job's calls read long before the fabric has been
judged at their moment (a replay, a pod's stage 2 behind) still meet the incident that explains
them, as in process."""

from __future__ import annotations

import pytest
from helpers.job_scenarios import STORM, job_incidents, job_trace

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.job_stage import JOB_KINDS
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, PhaseMessage, Watermark, decode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.job_worker import JobWorker

pytestmark = pytest.mark.slow  # a simulated scenario replayed in process

S = 1_000_000_000


def streamed(path, fabric: list[Anomaly], channels: int) -> list[Anomaly]:
    """Every call of the trace read at once, as a replay published at full speed is; the fabric's
    incidents read as stage 2 publishes them, each symptoms partition saying how far it has judged
    (the last one a second behind the others)."""
    jobs = JobWorker(DetectorConfig(), startup_wait_s=0)
    with TraceReader(path) as reader:
        for rec in reader:
            if rec.topic == topics.PHASES:
                jobs.on_phase(decode(rec.value(), PhaseMessage), rec.ts_ns)
    fired = jobs.advance(0.0)
    assert fired == [] and jobs.now_ns == 0, "nothing judged before the fabric says how far it is"
    end = max(a.ts_ns for a in fabric) + 10 * S
    wall = 0.0
    for i, a in enumerate([*fabric, None]):
        ts_ns = end if a is None else a.ts_ns
        if a is not None:
            jobs.on_anomaly(a)
        wall += 0.01
        for c in range(channels):
            jobs.on_progress(Watermark(f"s/{c}", ts_ns - (S if c == channels - 1 and i else 0)), wall)
        fired += jobs.advance(wall)
    jobs.on_progress(Watermark(f"s/{channels - 1}", end), wall)
    return fired + jobs.advance(wall)


def test_calls_read_ahead_of_the_fabric_meet_the_storm_that_hung_them(tmp_path):
    path = job_trace(tmp_path, "storm", STORM)
    events = replay_trace(path, Pipeline(DetectorConfig())).anomalies
    kinds = {a.fingerprint: a.kind for a in events}
    expected = job_incidents(events, kinds)
    assert ("job_hang", "firing", "llm-a", "pfc_storm") in expected
    got = streamed(path, [a for a in events if a.kind not in JOB_KINDS], channels=3)
    assert job_incidents(got, kinds) == expected


def test_the_job_stage_waits_for_the_stage_2s_that_have_not_spoken_yet(tmp_path):
    """For 5 s from the first progress heard, another stage 2 may still be on its way (a worker
    starting): nothing is judged; one that stops saying anything for 30 s holds nothing back."""
    jobs = JobWorker(DetectorConfig(), startup_wait_s=5, stall_after_s=30)
    path = job_trace(tmp_path, "quiet", "", duration=20)
    with TraceReader(path) as reader:
        for rec in reader:
            if rec.topic == topics.PHASES:
                jobs.on_phase(decode(rec.value(), PhaseMessage), rec.ts_ns)
    start = jobs.held
    jobs.on_progress(Watermark("s/0", 2**62), 0.0)
    assert jobs.advance(4.0) == [] and jobs.held == start
    jobs.on_progress(Watermark("s/1", 0), 4.5)  # a pod's stage 2 that has judged nothing yet
    jobs.advance(6.0)
    assert jobs.held == start and jobs.now_ns == 0
    jobs.on_progress(Watermark("s/0", 2**62), 40.0)
    jobs.advance(40.0)
    assert jobs.held == 0, "a stage 2 silent for stall_after_s holds nothing back"


def test_calls_no_stage_2_speaks_of_are_held_within_a_bound(tmp_path):
    """A fabric with jobs but no stage 2 progress (no counters published) does not grow the job
    stage without end: past ``max_held`` the oldest are taken."""
    jobs = JobWorker(DetectorConfig(), max_held=10)
    path = job_trace(tmp_path, "quiet", "", duration=20)
    with TraceReader(path) as reader:
        for rec in reader:
            if rec.topic == topics.PHASES:
                jobs.on_phase(decode(rec.value(), PhaseMessage), rec.ts_ns)
                jobs.advance(0.0)
    assert jobs.held == 10
