"""Decoding a snapshot decodes each distinct counter table once: what it gives, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch.detectors.rates import RateEngine
from fabricwatch.schemas import messages
from fabricwatch.schemas.messages import CounterSpec, DecodeError, Snapshot, decode, encode

TABLE = [
    CounterSpec("tx_bytes"),
    CounterSpec("rx_pfc_frames", index=3),
    CounterSpec("out_of_buffer", width=32),
]


def snapshot(device: str, ts_ns: int, counters: list[CounterSpec] = TABLE) -> bytes:
    return encode(Snapshot(device, "nic", ts_ns, counters, ["1"], [[10 * ts_ns, 1, None][: len(counters)]]))


def test_snapshots_with_one_table_share_it_and_read_as_before():
    a, b = decode(snapshot("a", 1), Snapshot), decode(snapshot("b", 2), Snapshot)
    assert a.counters == TABLE and a.counters is b.counters
    assert a == Snapshot("a", "nic", 1, TABLE, ["1"], [[10, 1, None]]).packed()
    other = decode(snapshot("c", 3, TABLE[:2]), Snapshot)
    assert other.counters == TABLE[:2] and other.counters is not a.counters


def test_the_rate_engine_finds_a_shared_table_s_layout_and_a_fresh_list_s_alike():
    engine = RateEngine()
    shared = decode(snapshot("a", 1), Snapshot)
    fresh = Snapshot("b", "nic", 1, list(TABLE), ["1"], [[10, 1, None]])
    assert engine._layout(shared.counters) is engine._layout(fresh.counters)


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":1}],'
            b'"ports":["1"],"values":[[1]]}',
            "Expected `str`, got `int` - at `$.counters[0].name`",
        ),
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":"\xc3("}],'
            b'"ports":["1"],"values":[[1]]}',
            "not valid JSON",
        ),
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":"x"}],'
            b'"ports":["1"],"values":[[1,2]]}',
            "values[0] has 2 entries but there are 1 counters",
        ),
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[],'
            b'"ports":[],"values":[],"v":9}',
            "unsupported schema version v=9",
        ),
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":"x"}],'
            b'"ports":["1"],"values":"AQAAAAAAAA=="}',
            "values has 7 bytes but 1 ports x 1 counters of uint64 take 8",
        ),
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":"x"}],'
            b'"ports":["1"],"values":"AQAAAAAAAAA=","unknown":[1]}',
            "unknown names a position outside the 1 values",
        ),
        (
            b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":"x"}],'
            b'"ports":["1"],"values":"AQAAAAAAAAA?"}',
            "Invalid base64 encoded string - at `$.values`",
        ),
    ],
)
def test_a_bad_snapshot_is_a_decode_error_naming_what_is_wrong(wire, reason):
    with pytest.raises(DecodeError) as err:
        decode(wire, Snapshot)
    assert reason in str(err.value)


def test_a_snapshot_travels_as_bytes_and_reads_as_the_rows_it_was_built_from():
    """A collector builds rows (None: not reported); the wire carries the matrix's bytes and the
    unknown positions, and both forms give one matrix, including a 64-bit counter near its wrap."""
    rows = [[2**64 - 1, 1, None], [None, 0, 7]]
    built = Snapshot("a", "nic", 1, TABLE, ["1", "2"], rows)
    wire = encode(built)
    assert b'"unknown":[2,3]' in wire and b"[[" not in wire
    sent = decode(wire, Snapshot)
    assert isinstance(sent.values, bytes)
    for snap in (built, sent):
        raw, valid = snap.matrix()
        assert raw.dtype == np.uint64 and raw.tolist() == [[2**64 - 1, 1, 0], [0, 0, 7]]
        assert valid.tolist() == [[True, True, False], [False, True, True]]
    assert decode(encode(Snapshot("b", "nic", 1, TABLE, ["1"], [[1, 2, 3]])), Snapshot).matrix()[1] is None


def test_rows_as_earlier_builds_and_recorded_traces_send_them_are_still_read():
    wire = (
        b'{"type":"snapshot","device":"a","device_kind":"nic","ts_ns":1,"counters":[{"name":"x"},'
        b'{"name":"y"}],"ports":["1"],"values":[[5,null]]}'
    )
    raw, valid = decode(wire, Snapshot).matrix()
    assert raw.tolist() == [[5, 0]] and valid.tolist() == [[True, False]]


def test_the_rates_of_either_form_are_the_same():
    """Stage 1 stacks packed NIC snapshots from their bytes and rows as before: one answer."""

    def frames(form):
        engine = RateEngine()
        snaps = [
            form(Snapshot(d, "nic", t * 10**9, TABLE, ["1"], [[1000 * t * (i + 1), 3 * t, t % 2 * 5]]))
            for t in (1, 2, 3)
            for i, d in enumerate("abc")
        ]
        return [engine.update_batch(snaps[k : k + 3], [None] * 3) for k in range(0, 9, 3)]

    rows = frames(lambda s: s)
    packed = frames(lambda s: decode(encode(s), Snapshot))
    assert [f is None for batch in rows for f in batch] == [True] * 3 + [False] * 6
    for a, b in zip(rows[1] + rows[2], packed[1] + packed[2], strict=True):
        np.testing.assert_array_equal(a.values, b.values)


def test_the_remembered_tables_are_bounded(monkeypatch):
    monkeypatch.setattr(messages, "COUNTER_TABLES_MAX", 3)
    monkeypatch.setattr(messages, "_counter_tables", {})
    for n in range(10):
        decode(snapshot("a", 1, [CounterSpec(f"c{n}"), *TABLE[1:]]), Snapshot)
    assert 1 <= len(messages._counter_tables) <= 3


def test_a_device_name_no_host_has_is_refused_not_tracked():
    """Found by the fuzz (a real switch's readings under a 100,000-character name, sent again and
    again): decoded as a device, its copies of other devices' counters fired an incast of their own."""
    assert decode(snapshot("h" * 256, 1), Snapshot).device == "h" * 256
    for expected in (None, Snapshot):
        with pytest.raises(DecodeError, match="length <= 256"):
            decode(snapshot("x" * 100_000, 1), expected)
