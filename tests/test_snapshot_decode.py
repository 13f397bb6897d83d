"""Decoding a snapshot decodes each distinct counter table once: what it gives, and what it refuses."""

from __future__ import annotations

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
    assert a == Snapshot("a", "nic", 1, TABLE, ["1"], [[10, 1, None]])
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
    ],
)
def test_a_bad_snapshot_is_a_decode_error_naming_what_is_wrong(wire, reason):
    with pytest.raises(DecodeError) as err:
        decode(wire, Snapshot)
    assert reason in str(err.value)


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
