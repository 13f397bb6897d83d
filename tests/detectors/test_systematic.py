"""The per-port streaks every detector of rare events shares (``detectors/systematic.py``). A
healthy device's check is the common one: it takes a short path, and a paced detector's screen
skips it altogether (issue 37). What a device then reports must be what every check stepped in
full would have made it report."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch.detectors.systematic import Ports, Systematic

NS = 1_000_000_000


def _streaks() -> Systematic:
    return Systematic(persist_polls=2, window_polls=3, clear_after_s=30.0, lack_of_data_s=60.0)


def test_a_streak_found_right_after_one_that_ended_blind_has_its_own_peak():
    """A streak that ended for lack of data keeps its peak in that step (its last symptom says
    it); a fault seen again at the next check is a new streak, which must not report the old
    one's worst."""
    streaks = _streaks()
    seen, known = np.array([True]), np.array([True])
    streaks.step("nic0", seen, known, np.array([0.5]), 1 * NS, 1.0)
    assert streaks.step("nic0", seen, known, np.array([0.5]), 2 * NS, 1.0).ports.active[0]
    ended = streaks.step("nic0", ~seen, ~known, np.array([np.nan]), 63 * NS, 61.0)
    assert ended.ended[0] and ended.ports.peak[0] == 0.5
    streaks.step("nic0", seen, known, np.array([0.1]), 64 * NS, 1.0)
    again = streaks.step("nic0", seen, known, np.array([0.1]), 65 * NS, 1.0)
    assert again.ports.active[0] and again.ports.peak[0] == 0.1


def test_checks_count_towards_recovery_only_where_they_could_read():
    streaks = _streaks()
    both, none = np.array([True, True]), np.array([False, False])
    for t in (1, 2):
        step = streaks.step("sw0", both, both, np.ones(2), t * NS, 1.0)
    assert step.ports.active.tolist() == [True, True]
    for t in range(3, 34):
        step = streaks.step("sw0", none, np.array([True, False]), np.zeros(2), t * NS, 1.0)
    assert step.ports.active.tolist() == [False, True] and step.cleared.sum() == 0  # port 0 at t=32


def _run(rng: np.random.Generator, polls: int) -> list[tuple]:
    """What a device's streaks report over a random run of checks: per check, the reported ports
    and what their symptoms read (start, peak, checks in the window)."""
    streaks = _streaks()
    out, t = [], 0
    for _ in range(polls):
        dt_s = float(rng.choice([1.0, 10.0, 70.0], p=[0.8, 0.15, 0.05]))
        t += int(dt_s * NS)
        known = rng.random(4) < 0.85
        seen = known & (rng.random(4) < 0.12)
        step = streaks.step("sw0", seen, known, rng.random(4), t, dt_s)
        reported = step.ports.active | step.cleared | step.ended
        out.append(
            tuple(
                (
                    p,
                    bool(step.ports.active[p]),
                    bool(step.cleared[p]),
                    bool(step.ended[p]),
                    int(step.ports.since_ns[p]),
                    float(step.ports.peak[p]),
                    step.polls(p),
                )
                for p in np.flatnonzero(reported)
            )
        )
    return out


@pytest.mark.parametrize("seed", range(5))
def test_healthy_checks_skipped_report_what_checks_stepped_in_full_do(seed, monkeypatch):
    """The short path (and a screen's skipped check) against every check stepped in full, over
    random runs with faults, unknown ports, gaps past ``lack_of_data_s`` and recoveries."""
    assert any(_run(np.random.default_rng(seed), 400)), "the run reports nothing: it tests nothing"
    short = _run(np.random.default_rng(seed), 400)
    monkeypatch.setattr(Ports, "open", property(lambda self: True))  # every check in full
    assert short == _run(np.random.default_rng(seed), 400)
