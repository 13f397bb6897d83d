"""Replay's pace: a record whose clock is far ahead sets no pace; a gap in the recording does."""

from __future__ import annotations

from fabricwatch.streams.traces import Pace

NS = 1_000_000_000


def test_one_record_an_hour_ahead_does_not_stall_the_replay():
    """Found (issue 33, 8): `replay --broker --speed 4` waited 900 s on a record stamped +1 h."""
    pace = Pace(4.0, started=100.0)
    stamps = [i * NS // 10 for i in range(100)]
    stamps.insert(50, 3600 * NS + 5 * NS)  # one device's clock an hour ahead
    dues = [pace.due(ts) for ts in stamps]
    assert max(dues) <= 100.0 + 9.9 / 4 + 1e-9  # the 9.9 s of the trace at 4x, nothing more
    assert dues[-1] == 100.0 + 9.9 / 4


def test_a_gap_in_the_recording_is_waited_out_at_the_replay_s_speed():
    pace = Pace(10.0, started=0.0)
    before = [pace.due(i * NS) for i in range(10)]
    after = [pace.due(100 * NS + i * NS // 10) for i in range(40)]  # the whole fabric, 100 s on
    assert before[-1] == 0.9
    assert after[-1] == (100 * NS + 39 * NS // 10) / NS / 10  # the gap, at 10x
    assert sum(d < 1.0 for d in after) == Pace.CONFIRM - 1  # sent before the jump was confirmed
