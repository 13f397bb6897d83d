"""A worker that processes more slowly than input arrives says so (issue 16, lever 4): how old its
newest input was, how fast that grows, and "falling behind" in /healthz, /metrics and the log, once
per change. It stays healthy: a restart would lose its state and make it later still."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from fabricwatch.streams.health import Progress

NOW = 1_800_000_000.0


def feed(progress: Progress, ages: list[float], start: float = NOW) -> list[str]:
    """One batch a second whose newest input is ``ages[i]`` seconds old; the log lines it causes."""
    lines = []
    for i, age in enumerate(ages):
        now = start + i
        if line := progress.input_age("stage1", now - age, now=now):
            lines.append(line)
    return lines


def test_a_worker_keeping_up_is_not_falling_behind():
    progress = Progress()
    assert feed(progress, [0.3 + 0.2 * (i % 3) for i in range(300)]) == []
    assert not progress.falling_behind("stage1")
    assert abs(progress.growth("stage1")) < 0.01


def test_a_worker_losing_a_fifth_of_real_time_says_so_once_then_once_when_it_recovers():
    progress = Progress()
    losing = [0.5 + 0.2 * i for i in range(120)]  # 0.2 s older every second: 24 s late after 2 min
    lines = feed(progress, losing)
    assert len(lines) == 1 and lines[0].startswith("stage1 is falling behind: its newest input was")
    assert progress.falling_behind("stage1")
    assert abs(progress.growth("stage1") - 0.2) < 0.01
    ok, detail = progress.liveness(lag=5000, now=0.0)
    assert ok, "behind is not stuck: a restart would not help"
    assert "falling behind: stage1 24.3 s (+0.20 s/s)" in detail
    assert progress.delays()["stage1"]["falling_behind"] is True

    catching_up = [losing[-1] - 0.5 * i for i in range(1, 48)]
    lines = feed(progress, catching_up, start=NOW + len(losing))
    assert len(lines) == 1 and lines[0].startswith("stage1 keeps up again")
    assert not progress.falling_behind("stage1")


def test_one_slow_batch_is_not_a_trend():
    progress = Progress()
    ages = [0.5] * 30 + [8.0] + [0.5] * 30  # a pause of 8 s, then caught up at once
    assert feed(progress, ages) == []


def test_an_old_trace_replayed_at_its_own_pace_is_old_but_not_falling_behind():
    progress = Progress()
    assert feed(progress, [86_400.0 + 0.1 * (i % 2) for i in range(200)]) == []
    assert progress.behind("stage1") >= 86_400 and not progress.falling_behind("stage1")


def test_the_delay_and_its_growth_are_metrics():
    progress = Progress()
    feed(progress, [0.5 + 0.2 * i for i in range(60)])
    got = {
        (s.name, tuple(s.labels.items())): s.value
        for family in text_string_to_metric_families(progress.prometheus(lag=0).decode())
        for s in family.samples
    }
    assert abs(got[("fabricwatch_behind_seconds", (("stage", "stage1"),))] - 12.3) < 1e-6
    assert abs(got[("fabricwatch_behind_growth", (("stage", "stage1"),))] - 0.2) < 1e-3


def test_a_worker_taking_ten_batches_a_second_is_judged_on_its_trend_too():
    """Batches come many times a second; the trend is sampled once a second whatever their rate."""
    progress = Progress()
    lines = []
    for i in range(1200):  # 120 s, a batch every 100 ms, 0.2 s later each second
        now = NOW + i / 10
        if line := progress.input_age("stage1", now - (0.5 + 0.02 * i), now=now):
            lines.append(line)
    assert len(lines) == 1 and progress.falling_behind("stage1")
    assert abs(progress.growth("stage1") - 0.2) < 0.01


def test_a_worker_is_ready_once_both_its_groups_assigned_it_and_it_read_the_topology():
    """Stage 1 and stage 2 read in groups of their own: partitions of either may still be coming."""
    progress = Progress()
    progress.inputs_ready = True
    progress.joined.add("stage2")
    ready, detail = progress.readiness()
    assert not ready and "stage1" in detail
    progress.joined.add("stage1")
    assert progress.readiness() == (True, "ready")
