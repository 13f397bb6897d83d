"""Issue 35, item 2: a job's step time worse than its own recent past is an incident of the job
("step time went from 1.9 s to 2.6 s"), explained by a fabric incident on its hosts when one is
open; one long step (a checkpoint) or one slow rank is not a slower job."""

from __future__ import annotations

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.job_stage import EXPLAIN_WAIT_NS, JobStage
from fabricwatch.schemas.messages import Anomaly, RootCause, Step, Steps

S = 1_000_000_000
T0 = 1_767_225_600 * S
HOSTS = {0: "h000", 1: "h001", 2: "h002", 3: "h003"}


def run(step_s: list[float], fabric: list[Anomaly] = (), slow_rank: int | None = None) -> list[Anomaly]:
    """The job's steps, one after another, each rank's as long as the step (``slow_rank``'s twice
    as long), sent as each ends, the stage judged as they come and for 10 s after."""
    stage = JobStage(DetectorConfig())
    stage.on_fabric(list(fabric))
    out, t = [], T0
    for n, dur in enumerate(step_s):
        ranks = [Step(n, r, t, int((2 if r == slow_rank else 1) * dur * S)) for r in HOSTS]
        stage.on_steps(Steps(job="llm-a", ts_ns=t, steps=ranks, rank_hosts=HOSTS, source="kineto"))
        t += int(dur * S)
        out += stage.evaluate(t)
    for tick in range(1, 21):
        out += stage.evaluate(t + tick * S // 2)
    return out


def test_a_job_whose_steps_take_longer_is_slowed_down_and_says_by_how_much():
    events = run([1.9] * 30 + [2.6] * 10)
    (fired,) = [a for a in events if a.status == "firing"]
    assert fired.kind == "job_slowdown" and fired.root == RootCause("llm-a", group="job:llm-a")
    assert fired.summary.startswith("llm-a step time 2600 ms, 37% above its 1900 ms")
    assert "nothing in the fabric explains it" in fired.summary
    assert fired.evidence["step_ms"] == 2600 and fired.evidence["baseline_step_ms"] == 1900
    assert fired.hosts == sorted(HOSTS.values()) and fired.severity == "warning"
    first_slow = T0 + int(30 * 1.9 * S)
    # begun within the recent steps whose median turned, found once slow 3 judgements in a row
    assert abs(fired.start_ns - first_slow) <= 5 * 1.9 * S
    assert fired.ts_ns - first_slow <= 8 * 2.6 * S + EXPLAIN_WAIT_NS


def test_a_storm_on_a_job_host_is_its_slower_steps_cause():
    storm = Anomaly(
        "storm-fp", "pfc_storm", "critical", "firing", T0 + 55 * S, T0 + 56 * S,
        RootCause("h002/mlx5_0", "1", 3), "PFC storm", hosts=["h002"], devices=["h002/mlx5_0"],
    )  # fmt: skip
    (fired,) = [a for a in run([1.9] * 30 + [2.6] * 10, [storm]) if a.status == "firing"]
    assert fired.caused_by == "storm-fp" and "caused by the pfc storm at h002/mlx5_0 1" in fired.summary


def test_one_long_step_or_one_slow_rank_is_not_a_slower_job():
    assert run([1.9] * 30 + [9.0] + [1.9] * 10) == [], "a checkpoint between two steps"
    assert run([1.9] * 40, slow_rank=3) == [], "the median rank's step is the job's"
