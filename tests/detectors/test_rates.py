"""Counter arithmetic: wraps, resets, gaps, duplicates, late snapshots, scaled IB counters."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.detectors.rates import HOLD_MAX_S, RateEngine
from fabricwatch.schemas.messages import CounterSpec, Snapshot
from fabricwatch.schemas.vocabulary import max_rate

T0 = 1_700_000_000_000_000_000
BYTES_MAX = max_rate("tx_bytes")
OOB_MAX = max_rate("out_of_buffer")


def snap(ts_ns: int, counters: list[CounterSpec], rows: list[list[int | None]], ports=None) -> Snapshot:
    ports = ports or [f"p{i}" for i in range(len(rows))]
    return Snapshot(device="d", device_kind="nic", ts_ns=ts_ns, counters=counters, ports=ports, values=rows)


def run(engine: RateEngine, snaps: list[Snapshot]) -> list:
    return [f for f in (engine.update(s) for s in snaps) if f is not None]


BYTES64 = CounterSpec("tx_bytes", width=64)
OOB32 = CounterSpec("out_of_buffer", width=32)
QOCC = CounterSpec("queue_occupancy_bytes", kind="gauge", index=3)
WM = CounterSpec("queue_watermark_bytes", kind="watermark", index=3)


@settings(max_examples=200, deadline=None)
@given(
    width=st.sampled_from([32, 64]),
    start=st.integers(min_value=0, max_value=2**64 - 1),
    dt_ms=st.sampled_from([100, 1000, 10_000]),
    fractions=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=20),
)
def test_wrapped_counter_gives_exact_increments(width, start, dt_ms, fractions):
    """A counter that wraps any number of times over a run still yields the true per-interval rate."""
    spec = CounterSpec("out_of_buffer", width=width)
    limit = min(OOB_MAX * dt_ms / 1000, 2**width - 1)
    increments = [int(f * limit) for f in fractions]
    modulus = 2**width
    value = start % modulus
    snaps = [snap(T0, [spec], [[value]])]
    for i, inc in enumerate(increments, start=1):
        value = (value + inc) % modulus
        snaps.append(snap(T0 + i * dt_ms * 1_000_000, [spec], [[value]]))
    frames = run(RateEngine(), snaps)
    assert len(frames) == len(increments)
    pending, moved = 0, False
    for f, inc in zip(frames, increments, strict=True):
        pending += inc
        if math.isnan(f.values[0, 0]):  # an unchanged read after movement: not refreshed yet
            assert inc == 0 and moved
            continue
        assert math.isclose(f.values[0, 0] * f.dt_s, pending, rel_tol=1e-9, abs_tol=1e-6)
        pending, moved = 0, inc > 0


def test_64bit_wrap_near_the_top():
    e = RateEngine()
    top = 2**64 - 1000
    frames = run(e, [snap(T0, [BYTES64], [[top]]), snap(T0 + 10**9, [BYTES64], [[500]])])
    assert frames[0].values[0, 0] == 1500.0
    assert e.stats.port_resets == 0


def test_64bit_decrease_far_from_top_is_a_reset_counting_from_zero():
    e = RateEngine()
    frames = run(e, [snap(T0, [BYTES64], [[10**15]]), snap(T0 + 10**9, [BYTES64], [[4096]])])
    assert frames[0].values[0, 0] == 4096.0
    assert e.stats.port_resets == 1


def test_port_reset_also_resets_32bit_counters_that_would_pass_for_a_wrap():
    """A driver reload zeroes every counter; the 32-bit one must not read as a 4 G wrap."""
    e = RateEngine()
    dt = 10 * 10**9  # at 10 s polling a 32-bit wrap of ~4.29e9 is physically possible
    before = [[10**14, 2**32 - 10]]
    after = [[2000, 7]]
    frames = run(e, [snap(T0, [BYTES64, OOB32], before), snap(T0 + dt, [BYTES64, OOB32], after)])
    assert frames[0].values[0].tolist() == [200.0, 0.7]


def test_a_lone_reset_of_a_32bit_counter_is_a_reset_not_a_wrap():
    """Found on real mlx5 output: rx_out_of_buffer 534,918,379 -> 1,000 with nothing else moving
    down was read as a wrap, 3.76e9 drops per second, and no reset counted."""
    e = RateEngine()
    frames = run(e, [snap(T0, [OOB32], [[534_918_379]]), snap(T0 + 10**9, [OOB32], [[1_000]])])
    assert frames[0].values[0, 0] == 1000.0
    assert e.stats.port_resets == 1


def test_the_line_rate_tells_a_reset_from_a_wrap_at_slow_polls():
    """At 4 s between polls the same drop is within the vocabulary's bound (a wrap of 3.76e9 in
    4 s is 0.94e9/s); on a 400 Gb/s port (at most 0.6e9 packets/s) it cannot be a wrap."""
    line = np.array([400e9 / 8])
    for line_Bps, resets in ((None, 0), (line, 1)):
        e = RateEngine()
        first, then = snap(T0, [OOB32], [[534_918_379]]), snap(T0 + 4 * 10**9, [OOB32], [[1_000]])
        e.update(first, line_Bps)
        frame = e.update(then, line_Bps)
        assert e.stats.port_resets == resets
        assert frame.values[0, 0] == (250.0 if resets else (2**32 - 534_918_379 + 1_000) / 4)


def test_a_real_wrap_at_line_rate_stays_a_wrap():
    e = RateEngine()
    line = np.array([400e9 / 8])
    near_top = 2**32 - 100_000_000  # 0.5e9 drops in a second on a 400 Gb/s port: possible
    e.update(snap(T0, [OOB32], [[near_top]]), line)
    frame = e.update(snap(T0 + 10**9, [OOB32], [[400_000_000]]), line)
    assert frame.values[0, 0] == 500_000_000.0 and e.stats.port_resets == 0


def test_reset_on_one_port_leaves_the_other_port_alone():
    e = RateEngine()
    s0 = snap(T0, [BYTES64, OOB32], [[10**14, 2**32 - 10], [10**14, 2**32 - 10]])
    s1 = snap(T0 + 10 * 10**9, [BYTES64, OOB32], [[2000, 7], [10**14 + 10, 7]])
    frames = run(e, [s0, s1])
    assert frames[0].values[0].tolist() == [200.0, 0.7]
    assert frames[0].values[1].tolist() == [1.0, 1.7]  # port 1's 32-bit counter did wrap


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(1, 20_000)),
        min_size=2,
        max_size=12,
    )
)
def test_garbage_never_gives_negative_or_impossible_rates(steps):
    """Whatever a broken collector sends, a rate is either physically possible or unknown."""
    e = RateEngine()
    ts = T0
    for v64, v32, dt_ms in steps:
        ts += dt_ms * 1_000_000
        frame = e.update(snap(ts, [BYTES64, OOB32], [[v64, v32]]))
        if frame is None:
            continue
        r = frame.values[0]
        for rate, cap in zip(r, (BYTES_MAX, OOB_MAX), strict=True):
            assert math.isnan(rate) or 0.0 <= rate <= cap


def test_duplicates_and_late_snapshots_are_dropped_and_counted():
    e = RateEngine()
    s = [snap(T0 + i * 10**9, [BYTES64], [[1000 * i]]) for i in range(5)]
    frames = run(e, [s[0], s[1], s[1], s[3], s[2], s[4]])
    assert [f.ts_ns for f in frames] == [s[1].ts_ns, s[3].ts_ns, s[4].ts_ns]
    assert [f.values[0, 0] for f in frames] == [1000.0, 1000.0, 1000.0]
    assert (e.stats.duplicates, e.stats.late) == (1, 1)


def test_gap_gives_the_average_rate_over_the_gap():
    e = RateEngine()
    frames = run(e, [snap(T0, [BYTES64], [[0]]), snap(T0 + 7 * 10**9, [BYTES64], [[7_000_000]])])
    assert frames[0].dt_s == 7.0
    assert frames[0].values[0, 0] == 1_000_000.0


def test_ib_data_counters_count_four_octet_words_and_wrap_at_their_width():
    """port_xmit_data counts octets / 4: the delta is unwrapped first, then multiplied by 4."""
    e = RateEngine()
    spec = CounterSpec("tx_bytes", width=32, scale=4)
    frames = run(e, [snap(T0, [spec], [[2**32 - 100]]), snap(T0 + 10**9, [spec], [[900]])])
    assert frames[0].values[0, 0] == 4000.0


def test_gauges_and_watermarks_pass_through_and_missing_values_are_unknown():
    e = RateEngine()
    cols = [BYTES64, QOCC, WM]
    frames = run(
        e,
        [
            snap(T0, cols, [[0, 10, 20]]),
            snap(T0 + 10**9, cols, [[None, 300_000, 450_000]]),
            snap(T0 + 2 * 10**9, cols, [[5000, 0, 1]]),
            snap(T0 + 3 * 10**9, cols, [[6000, 0, 1]]),
        ],
    )
    assert math.isnan(frames[0].values[0, 0])
    assert frames[0].values[0, 1:].tolist() == [300_000.0, 450_000.0]
    assert frames[1].values[0, 0] == 2500.0  # over the 2 s since the last value read, not 5000 in 1 s
    assert frames[2].values[0, 0] == 1000.0


def test_a_counter_missing_for_polls_is_unknown_then_its_rate_spans_the_gap():
    """A switch refreshing queue counters every 3 s, read every second, with the repeated reads
    marked missing: one true rate per refresh, never a zero between them."""
    e = RateEngine()
    cols = [BYTES64, WM]
    rows = [[0, 5], [None, None], [None, None], [3000, 7], [None, 8], [None, None], [6000, 9]]
    frames = run(e, [snap(T0 + i * 10**9, cols, [r]) for i, r in enumerate(rows)])
    rates = [f.values[0, 0] for f in frames]
    assert [r for r in rates if not math.isnan(r)] == [1000.0, 1000.0]
    assert sum(math.isnan(r) for r in rates) == 4
    assert [f.values[0, 1] for f in frames][3] == 8.0  # a watermark is never held: it is one read's peak
    assert math.isnan(frames[0].values[0, 1])


def test_a_value_held_past_the_hold_limit_is_let_go():
    e = RateEngine()
    late = T0 + int((HOLD_MAX_S + 5) * 1e9)
    frames = run(
        e,
        [
            snap(T0, [BYTES64], [[0]]),
            snap(T0 + 10**9, [BYTES64], [[None]]),
            snap(late, [BYTES64], [[9_000]]),
            snap(late + 10**9, [BYTES64], [[10_000]]),
        ],
    )
    assert math.isnan(frames[1].values[0, 0])
    assert frames[2].values[0, 0] == 1000.0


def test_held_values_survive_a_port_joining():
    e = RateEngine()
    frames = run(
        e,
        [
            snap(T0, [BYTES64], [[0]], ports=["a"]),
            snap(T0 + 10**9, [BYTES64], [[None]], ports=["a"]),
            snap(T0 + 2 * 10**9, [BYTES64], [[2000], [50]], ports=["a", "b"]),
        ],
    )
    assert frames[1].values[0, 0] == 1000.0 and math.isnan(frames[1].values[1, 0])


def test_a_counter_that_appears_mid_run_starts_unknown_and_others_carry_on():
    e = RateEngine()
    frames = run(
        e,
        [
            snap(T0, [BYTES64], [[0]]),
            snap(T0 + 10**9, [BYTES64, OOB32], [[100, 5]]),
            snap(T0 + 2 * 10**9, [BYTES64, OOB32], [[300, 9]]),
        ],
    )
    assert frames[0].values[0, 0] == 100.0 and math.isnan(frames[0].values[0, 1])
    assert frames[1].values[0].tolist() == [200.0, 4.0]
    assert e.stats.layout_changes == 1


def test_ports_reordered_between_snapshots_keep_their_own_history():
    e = RateEngine()
    s0 = snap(T0, [BYTES64], [[100], [5000]], ports=["a", "b"])
    s1 = snap(T0 + 10**9, [BYTES64], [[5100], [200]], ports=["b", "a"])
    frames = run(e, [s0, s1])
    assert frames[0].values[:, 0].tolist() == [100.0, 100.0]


def test_devices_are_independent():
    e = RateEngine()
    a0 = Snapshot(device="a", device_kind="nic", ts_ns=T0, counters=[BYTES64], ports=["1"], values=[[0]])
    b0 = Snapshot(device="b", device_kind="nic", ts_ns=T0 + 5, counters=[BYTES64], ports=["1"], values=[[0]])
    a1 = Snapshot(
        device="a", device_kind="nic", ts_ns=T0 + 10**9, counters=[BYTES64], ports=["1"], values=[[10]]
    )
    assert e.update(a0) is None and e.update(b0) is None
    assert e.update(a1).values[0, 0] == 10.0


def test_matrix_is_vectorised_over_ports_and_counters():
    e = RateEngine()
    cols = [CounterSpec("rx_pfc_frames", index=p) for p in range(8)]
    base = np.arange(64 * 8, dtype=np.int64).reshape(64, 8) * 1000
    frames = run(e, [snap(T0, cols, base.tolist()), snap(T0 + 10**9, cols, (base + 7).tolist())])
    assert frames[0].values.shape == (64, 8)
    assert np.all(frames[0].values == 7.0)
    idx, prio = frames[0].layout.indexed("rx_pfc_frames")
    assert prio.tolist() == list(range(8)) and idx.tolist() == list(range(8))


PKTS = CounterSpec("rx_packets", width=64)


def test_a_device_read_faster_than_it_refreshes_gives_unknown_then_the_true_rate():
    """Found (issue 15, class 5): a switch refreshing its counters every second, polled every half
    second, showed every other snapshot unchanged and the next doubled: 0, then 1.14x line rate.
    The unchanged read is unknown; the next change's rate spans the whole second."""
    e = RateEngine()
    rows, value, packets = [], 0, 0
    for i in range(9):
        if i % 2 == 1:  # the switch refreshed since the last read
            value += 50_000_000_000  # 50 GB/s: 400 Gb/s, at line rate
            packets += 12_000_000
        rows.append([value, packets])
    frames = run(e, [snap(T0 + i * 500_000_000, [BYTES64, PKTS], [r]) for i, r in enumerate(rows)])
    rates = [f.values[0, 0] for f in frames][1:]  # the first interval cannot tell: nothing was moving
    assert all(math.isnan(r) for r in rates[0::2]), "the reads that saw nothing new are unknown"
    assert rates[1::2] == [50e9, 50e9, 50e9], "the true rate, over the whole second, never doubled"
    assert e.stats.stale == 4


def test_ports_refreshed_out_of_step_give_unknown_then_the_true_rate_each():
    """Found (issue 33, real leaf counters): a switch refreshes each port's counters about every
    second, each port at its own phase, and is read every half second. Every other read of a busy
    port is unchanged while its neighbours moved, so the device as a whole never looked stale: the
    port read 0, then twice its rate. Now its unchanged read is unknown, and the next one spans
    the whole second; a port unchanged for three reads (a refresh every 1.5 s) too."""
    e = RateEngine()
    a = b = c = 0
    rows = []
    for i in range(13):
        a += 50_000_000_000 if i % 2 == 1 else 0  # port a: refreshed on odd reads
        b += 50_000_000_000 if i % 2 == 0 and i else 0  # port b: on even reads
        c += 75_000_000_000 if i % 3 == 0 and i else 0  # port c: every third read
        rows.append([[a], [b], [c]])
    frames = run(e, [snap(T0 + i * 500_000_000, [BYTES64], r) for i, r in enumerate(rows)])
    rates = np.array([f.values[:, 0] for f in frames])[3:]  # after every port has moved once
    for port in range(3):
        seen = rates[:, port]
        assert (seen[~np.isnan(seen)] == 50e9).all(), (port, seen)  # never 0, never doubled
    assert np.isnan(rates).sum() > 0 and e.stats.stale_ports > 0 and e.stats.stale == 0


def test_a_counter_read_from_another_source_for_one_poll_is_a_new_counter_never_a_rate():
    """Found (issue 33, 5): ethtool failed for one poll and tx_bytes came from sysfs, in 4-byte
    words; compared as one counter with ethtool's bytes it gave 1.47e9 then 2.10e9 B/s for a true
    1e9, with a port reset. A change of source (and of scale) is a new counter: unknown, then
    the true rate again."""
    words = CounterSpec("tx_bytes", width=64, scale=4)  # sysfs port_xmit_data
    e = RateEngine()
    by_bytes = [[i * 1_000_000_000 + 123_456_789] for i in range(6)]  # ethtool: 1e9 B/s
    rows = [(BYTES64, by_bytes[0]), (BYTES64, by_bytes[1]), (words, [by_bytes[2][0] // 4 + 7])]
    rows += [(BYTES64, by_bytes[3]), (BYTES64, by_bytes[4]), (BYTES64, by_bytes[5])]
    frames = run(e, [snap(T0 + i * 10**9, [spec], [r]) for i, (spec, r) in enumerate(rows)])
    rates = [f.values[0, 0] for f in frames]
    assert rates[0] == 1e9 and math.isnan(rates[1]) and math.isnan(rates[2])
    assert rates[3:] == [1e9, 1e9]
    assert e.stats.port_resets == 0


def test_a_port_back_after_missing_is_unknown_and_not_counted_impossible():
    """Found (issue 33, 6): a port that left a snapshot and came back had no previous value; its
    rates were unknown, as they should be, but counted as impossible first (11 of 14 columns)."""
    e = RateEngine()
    both, one = ["p0", "p1"], ["p0"]
    snaps = [
        snap(T0, [BYTES64], [[10**12], [5 * 10**12]], both),
        snap(T0 + 10**9, [BYTES64], [[10**12 + 10**9]], one),
        snap(T0 + 2 * 10**9, [BYTES64], [[10**12 + 2 * 10**9], [5 * 10**12 + 2 * 10**9]], both),
    ]
    last = run(e, snaps)[-1]
    assert last.values[0, 0] == 1e9 and math.isnan(last.values[1, 0])
    assert e.stats.impossible == 0


def test_a_device_that_goes_quiet_reads_zero_once_it_stays_unchanged():
    e = RateEngine()
    rows = [[0], [1000], [1000], [1000], [1000], [1000]]
    times = [0, 1, 2, 3, 4, 5]  # seconds
    frames = run(e, [snap(T0 + t * 10**9, [BYTES64], [r]) for t, r in zip(times, rows, strict=True)])
    rates = [f.values[0, 0] for f in frames]
    assert rates[0] == 1000.0 and math.isnan(rates[1]) and math.isnan(rates[2])  # maybe not refreshed
    assert rates[3:] == [0.0, 0.0], "unchanged past STALE_MAX_S: quiet, not stale"


def test_an_idle_device_is_zero_not_unknown():
    frames = run(RateEngine(), [snap(T0 + i * 10**9, [BYTES64], [[77]]) for i in range(4)])
    assert [f.values[0, 0] for f in frames] == [0.0, 0.0, 0.0]


def test_a_rate_past_the_port_s_line_rate_is_impossible():
    """Found (issue 15, class 5): the impossible-rate bound was one 2 Tb/s figure for every port;
    3.9x a 200G host port's line rate passed. Where the topology gives the line rate, it bounds."""
    e = RateEngine()
    line = np.array([25e9, 25e9])  # two 200 Gb/s ports, in bytes per second
    first = snap(T0, [BYTES64], [[0], [0]], ports=["p0", "p1"])
    second = snap(T0 + 10**9, [BYTES64], [[int(3.9 * 25e9)], [int(1.2 * 25e9)]], ports=["p0", "p1"])
    e.update(first, line)
    frame = e.update(second, line)
    assert math.isnan(frame.values[0, 0]) and frame.values[1, 0] == 1.2 * 25e9
    assert e.stats.impossible == 1
    plain = RateEngine()
    plain.update(first)
    assert plain.update(second).values[0, 0] == 3.9 * 25e9, "without a line rate, the vocabulary's bound"
