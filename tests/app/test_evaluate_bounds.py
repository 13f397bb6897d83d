"""A delay bound grows by a poll for each snapshot of the root's device that never arrived within it:
no detector sees a poll that was not delivered (found under --seeds: gaps_100ms_32h, seed 3, the
leaf's first poll after an incast began was missing, and the incast was late by exactly that poll)."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch.evaluate import missed_polls

MS = 1_000_000


def at(*ms: float) -> np.ndarray:
    return np.array([round(t * MS) for t in ms], dtype=np.int64)


@pytest.mark.parametrize(
    ("delivered", "start_ms", "missed"),
    [
        (at(11099, 11194, 11300, 11398, 11498, 11594, 11694), 11440, 0),  # every poll
        (at(11099, 11194, 11300, 11398, 11593, 11694, 11799), 11440, 1),  # seed 3: 11.5 missing
        (at(11300, 11398, 11498, 11694, 11799), 11440, 1),  # the second reading missing
        (at(11300, 11398, 11498, 11599, 11694, 11901), 11440, 0),  # a gap after the bound
        (at(11398, 11498, 11498, 11599, 11694), 11440, 0),  # a duplicate is not a gap
        (at(11398, 11799, 11901), 11440, 3),  # three missing: the bound grows with each
        (at(11300, 11398, 11502, 11599), 11499, 0),  # started just before a late read
    ],
)
def test_missing_snapshots_within_the_bound_extend_it(delivered, start_ms, missed):
    assert missed_polls(delivered, start_ms * MS, bound_s=0.2, poll_s=0.1) == missed


def test_a_device_with_no_snapshots_has_no_gaps_to_count():
    assert missed_polls(None, 0, 0.2, 0.1) == 0
    assert missed_polls(np.array([], dtype=np.int64), 0, 0.2, 0.1) == 0


def test_a_read_between_two_refreshes_is_not_a_delivered_poll(tmp_path):
    """Found under --seeds 1-5 (slow_refresh_500ms_64h, seeds 2-4): a switch refreshing every second,
    read every half second, repeats every other reading; the collapse on it was found within five
    of its refreshes but "late" by five half-second polls. A repeat brings nothing new to detect on."""
    from fabricwatch.evaluate import _delivered
    from fabricwatch.schemas import topics
    from fabricwatch.schemas.messages import CounterSpec, Snapshot
    from fabricwatch.schemas.trace import TraceWriter

    path = tmp_path / "t.trace"
    writer = TraceWriter(path, "test", 0)
    for k in range(6):
        ts = 10**9 + k * 500 * MS
        snap = Snapshot(
            "leaf01", "switch", ts, [CounterSpec("tx_bytes")], ["Ethernet0"], [[1000 + 10 * (k // 2)]]
        )
        writer.write_message(topics.COUNTERS, "leaf01", ts, snap)
    writer.close()
    times = _delivered(path)["leaf01"]
    assert times.tolist() == [10**9 + k * 500 * MS for k in (0, 2, 4)]
    assert missed_polls(times, 10**9 + 100 * MS, bound_s=1.0, poll_s=0.5) == 2  # 1.5 s and 2.5 s
