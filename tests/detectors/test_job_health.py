"""Issue 35: a job's slowdowns, stragglers and hangs, each tied to the fabric fault that explains it
or cleared of one, on simulated jobs whose calls run at the pace the fabric lets them (no real
time series of job records exists to test them on)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.job_scenarios import STORM, STRAGGLER, job_trace

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.evaluation import evaluate
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Anomaly

pytestmark = pytest.mark.slow  # simulated scenarios replayed in process

S = 1_000_000_000
T0 = 1_767_225_600 * S


def replayed(tmp_path: Path, name: str, faults: str, duration: int = 60, schedule: str = "") -> list[Anomaly]:
    trace = job_trace(tmp_path, name, faults, duration, schedule)
    return replay_trace(trace, Pipeline(DetectorConfig())).anomalies


def firing(events: list[Anomaly], kind: str) -> list[Anomaly]:
    return [a for a in events if a.kind == kind and a.status == "firing"]


def at_s(ns: int) -> float:
    return (ns - T0) / S


def test_a_storm_holding_the_jobs_collective_is_its_hang_and_its_cause(tmp_path):
    events = replayed(tmp_path, "storm", "  - {kind: pfc_storm, root: h003, start: 20, duration: 10}")
    (storm,) = firing(events, "pfc_storm")
    (hang,) = firing(events, "job_hang")
    assert hang.caused_by == storm.fingerprint and "caused by the pfc storm at h003/mlx5_0" in hang.summary
    assert hang.jobs == ["llm-a"] and hang.severity == "critical"
    assert 20 < at_s(hang.ts_ns) <= 24, "found within the hang's 3 s of silence, plus a poll"
    (ended,) = [a for a in events if a.kind == "job_hang" and a.status == "resolved"]
    assert 30 <= at_s(ended.ts_ns) <= 32, "over when the storm lets the call complete"
    assert not firing(events, "job_slowdown"), "one call stretched by the storm moves no median"


def test_a_straggler_host_is_named_and_the_slowdown_it_causes_is_its(tmp_path):
    events = replayed(
        tmp_path,
        "straggler",
        "  - {kind: straggler, host: h009, job: llm-a, delay: 0.05, start: 30, duration: 20}",
    )
    (straggler,) = firing(events, "job_straggler")
    assert straggler.root.device == "h009" and straggler.evidence["rank"] == 9
    assert straggler.evidence["late_ms"] == pytest.approx(50, abs=1)
    assert not straggler.caused_by and "nothing in the fabric explains it" in straggler.summary
    (slowdown,) = firing(events, "job_slowdown")
    assert slowdown.caused_by == straggler.fingerprint and "straggler, rank 9 on h009" in slowdown.summary
    assert not [a for a in events if a.kind not in ("job_straggler", "job_slowdown")], "nothing in the fabric"


def test_a_slow_link_found_after_the_job_felt_it_is_named_when_found(tmp_path):
    events = replayed(
        tmp_path,
        "slow_link",
        "  - {kind: speed_downshift, device: h006, factor: 0.5, start: 20, duration: 30}",
    )
    (link,) = firing(events, "slow_link")
    slowdown = [a for a in events if a.kind == "job_slowdown"]
    assert slowdown[0].status == "firing" and not slowdown[0].caused_by, "the job felt it first"
    assert at_s(slowdown[0].ts_ns) <= 28, "after 5 calls, 3 slow ones and 5 s waiting for a cause"
    named = [a for a in slowdown if a.status == "updated" and a.caused_by == link.fingerprint]
    assert (
        named
        and named[0].ts_ns == link.ts_ns
        and "caused by the slow link at h006/mlx5_0" in named[0].summary
    )
    assert slowdown[0].evidence["busbw_lost"] == pytest.approx(0.38, abs=0.05)


def test_an_incast_into_a_job_host_is_its_slowdowns_cause_not_an_older_fault_still_open(tmp_path):
    faults = (
        "  - {kind: speed_downshift, device: h006, factor: 0.5, start: 10, duration: 20}\n"
        "  - {kind: incast, receiver: h010, senders: 5, load: 0.5, start: 45, duration: 15}"
    )
    events = replayed(tmp_path, "incast", faults, duration=70)
    (incast,) = firing(events, "incast")
    late = [a for a in firing(events, "job_slowdown") if at_s(a.start_ns) > 40]
    assert [a.caused_by for a in late] == [incast.fingerprint]


@pytest.mark.parametrize(
    ("name", "schedule"),
    [
        (  # the job's messages shrink 32-fold halfway: a smaller call's bus bandwidth is lower
            # (each ring step pays a latency): another size bucket, not a slower job
            "smaller_messages",
            "      - {op: AllReduce, begin: 0, end: 30, load: 0.5, calls: {bytes: 268435456, comm: dp}}\n"
            "      - {op: AllReduce, begin: 30, end: 60, load: 0.5, calls: {bytes: 8388608, comm: dp}}",
        ),
        (  # a checkpoint: the job stops for 8 s between two phases, then goes on
            "checkpoint",
            "      - {op: AllReduce, begin: 0, end: 25, load: 0.5, calls: {comm: dp}}\n"
            "      - {op: AllReduce, begin: 33, end: 60, load: 0.5, calls: {comm: dp}}",
        ),
        (  # the job ends at 30 s: its silence after is not a hang
            "job_ends",
            "      - {op: AllReduce, begin: 0, end: 30, load: 0.5, calls: {bytes: 268435456, gap: 0.2}}",
        ),
    ],
)
def test_look_alikes_of_a_sick_job_stay_quiet(tmp_path, name, schedule):
    events = replayed(tmp_path, name, "", schedule=schedule)
    assert [a for a in events if a.kind.startswith("job_")] == []


def test_a_straggler_is_not_blamed_on_a_fault_elsewhere_on_its_job(tmp_path):
    """A slow link at h006 is open on the job when h011 starts entering late: the link slows every
    rank alike, so it does not explain one rank being last; the straggler is h011's own."""
    faults = (
        "  - {kind: speed_downshift, device: h006, factor: 0.5, start: 5, duration: 60}\n"
        "  - {kind: straggler, host: h011, job: llm-a, delay: 0.04, start: 35, duration: 20}"
    )
    events = replayed(tmp_path, "straggler_beside_a_slow_link", faults, duration=70)
    (link,) = firing(events, "slow_link")
    (straggler,) = firing(events, "job_straggler")
    assert link.ts_ns < straggler.ts_ns and straggler.root.device == "h011"
    assert straggler.caused_by == "" and "nothing in the fabric explains it" in straggler.summary


def test_the_simulator_labels_what_each_fault_does_to_the_timed_jobs_it_touches(tmp_path):
    """The suite scores a job's slowdowns and hangs by their cause: the simulator labels each as the
    effect of the fault at its hosts (a storm at a NIC stops the job's calls, an incast into its
    host or a straggler of its own slows them), and the incidents found are linked to those."""
    faults = "\n".join(
        [
            STORM,
            STRAGGLER.replace("start: 30", "start: 40"),
            "  - {kind: incast, receiver: h012, senders: 4, load: 0.5, start: 75, duration: 15}",
        ]
    )
    replay = replay_trace(job_trace(tmp_path, "effects", faults, duration=100), Pipeline(DetectorConfig()))
    effects = [
        (lb.kind, lb.root.device, lb.cause.kind, lb.cause.root.device)
        for lb in replay.pipeline.labels
        if lb.cause
    ]
    # moe-b runs on h012 too, but times no calls: nothing of it to label
    assert effects == [
        ("job_hang", "llm-a", "pfc_storm", "h003/mlx5_0"),
        ("job_slowdown", "llm-a", "job_straggler", "h009"),
        ("job_slowdown", "llm-a", "incast", "leaf01"),
    ]
    score = evaluate(replay.anomalies, replay.pipeline.labels, 1.0, 100)
    assert score.false_alerts == 0
    for kind in ("job_hang", "job_slowdown"):
        s = score.kinds[kind]
        assert (s.recall, s.precision, s.localisation) == (1.0, 1.0, 1.0), kind
