"""The trace file: round trips, reproducible bytes, damage tolerance, flat memory, documented example."""

from __future__ import annotations

import gzip
import logging
import re
import tracemalloc
import typing
from pathlib import Path

import pytest
from helpers.paths import DOCS

from fabricwatch.schemas import messages, topics
from fabricwatch.schemas.messages import CounterSpec, Label, Phase, RootCause, Snapshot
from fabricwatch.schemas.trace import TraceFormatError, TraceReader, TraceRecord, TraceWriter, read_labels

T0 = 1_700_000_000_000_000_000
DOC = DOCS / "trace-format.md"

SNAPSHOT = Snapshot(
    device="leaf01",
    device_kind="switch",
    ts_ns=T0,
    counters=[CounterSpec("tx_bytes"), CounterSpec("rx_pfc_frames", index=3)],
    ports=["Ethernet0", "Ethernet4"],
    values=[[1 << 40, 7], [12, None]],
)
PHASE = Phase(job="job1", comm="0xabc", op="AllToAll", begin_ns=T0, hosts=["h1", "h2"])
LABEL = Label(kind="incast", start_ns=T0, end_ns=T0 + 10, root=RootCause("leaf01", "Ethernet0"))
GARBAGE = b"\x00\xff not json"
PRETTY_JSON = b'{\n  "type": "snapshot"\n}'  # valid, but its newlines cannot sit inside a line
FOREIGN_OBJECT = b'{"type": "whatever", "x": [1, 2]}'  # embedded verbatim: payloads are not validated


def write_sample(path: Path) -> None:
    with TraceWriter(path, "test", T0, {"seed": 7, "scenario": "unit"}) as writer:
        writer.write_message(topics.COUNTERS, "leaf01", T0, SNAPSHOT)
        writer.write_message(topics.PHASES, "job1", T0 + 1, PHASE)
        writer.write_message(topics.LABELS, None, T0 + 2, LABEL)
        writer.write(topics.COUNTERS, None, T0 + 3, GARBAGE)
        writer.write(topics.COUNTERS, "leaf02", T0 + 4, PRETTY_JSON)
        writer.write(topics.COUNTERS, "leaf03", T0 + 5, FOREIGN_OBJECT)
        writer.write(topics.COUNTERS, "leaf04", T0 + 6, b"")
        assert writer.records == 7


def read_all(path: Path) -> tuple[TraceReader, list[TraceRecord], list[tuple[int, str]]]:
    errors: list[tuple[int, str]] = []
    with TraceReader(path, on_error=lambda line, reason: errors.append((line, reason))) as reader:
        records = list(reader)
    return reader, records, errors


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


HEADER = b'{"format":"fabricwatch-trace","version":1,"source":"hand","created_ns":1,"meta":{}}\n'


@pytest.mark.parametrize("name", ["sample.trace", "sample.trace.gz"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_sample(path)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")

    reader, records, errors = read_all(path)

    assert errors == []
    assert (reader.records, reader.malformed, reader.truncated) == (7, 0, False)
    assert reader.header.format == "fabricwatch-trace"
    assert (reader.header.version, reader.header.source, reader.header.created_ns) == (1, "test", T0)
    assert reader.header.meta == {"seed": 7, "scenario": "unit"}
    assert [(r.topic, r.key, r.ts_ns) for r in records] == [
        (topics.COUNTERS, "leaf01", T0),
        (topics.PHASES, "job1", T0 + 1),
        (topics.LABELS, None, T0 + 2),
        (topics.COUNTERS, None, T0 + 3),
        (topics.COUNTERS, "leaf02", T0 + 4),
        (topics.COUNTERS, "leaf03", T0 + 5),
        (topics.COUNTERS, "leaf04", T0 + 6),
    ]
    assert [messages.decode(r.value()) for r in records[:3]] == [SNAPSHOT.packed(), PHASE, LABEL]
    assert [r.value() for r in records[3:]] == [GARBAGE, PRETTY_JSON, FOREIGN_OBJECT, b""]
    assert records[5].payload is not None, "a one-line JSON object is embedded, not base64"
    assert all(r.payload_b64 is not None for r in (records[3], records[4], records[6]))


def test_records_are_one_json_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "sample.trace"
    write_sample(path)
    lines = path.read_bytes().decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 9
    assert lines[1].startswith('{"topic":"fabric.counters","key":"leaf01","ts_ns":')
    assert f',"payload":{FOREIGN_OBJECT.decode()}}}' in lines[6]


def test_gzip_is_detected_by_content_not_name(tmp_path: Path) -> None:
    gz, plain = tmp_path / "a.trace.gz", tmp_path / "b.trace"
    write_sample(gz)
    write_sample(plain)
    gz_renamed, plain_renamed = gz.rename(tmp_path / "a.trace"), plain.rename(tmp_path / "b.gz")
    assert [r.value() for r in read_all(gz_renamed)[1]] == [r.value() for r in read_all(plain_renamed)[1]]


@pytest.mark.parametrize("suffix", [".trace", ".trace.gz"])
def test_same_calls_give_identical_bytes(tmp_path: Path, suffix: str) -> None:
    first, second = tmp_path / f"first{suffix}", tmp_path / f"other-name{suffix}"
    write_sample(first)
    write_sample(second)
    assert first.read_bytes() == second.read_bytes()


def test_gzip_header_has_no_name_and_no_time(tmp_path: Path) -> None:
    path = tmp_path / "x.trace.gz"
    write_sample(path)
    head = path.read_bytes()[:10]
    flags, mtime = head[3], head[4:8]
    assert flags & 0x08 == 0, "FNAME flag set"
    assert mtime == b"\0\0\0\0"


def test_meta_key_order_does_not_change_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.trace", tmp_path / "b.trace"
    TraceWriter(a, "t", 1, {"x": 1, "y": 2}).close()
    TraceWriter(b, "t", 1, {"y": 2, "x": 1}).close()
    assert a.read_bytes() == b.read_bytes()


def test_malformed_lines_are_reported_skipped_and_counted(tmp_path: Path) -> None:
    good = b'{"topic":"fabric.phases","key":"j","ts_ns":%d,"payload":{"type":"phase"}}\n'
    path = tmp_path / "damaged.trace"
    write_lines(
        path,
        [
            HEADER,
            good % 1,  # line 2
            b'{"topic":"fabric.phases","key":"j","ts_ns":2,"payload":{"type":phase}}\n',  # 3: bad JSON
            b'{"topic":"fabric.phases","ts_ns":3,"payload":{}}\n',  # 4: no key
            b'{"topic":"fabric.phases","key":"j","ts_ns":"4","payload":{}}\n',  # 5: ts_ns a string
            b'{"topic":"t","key":null,"ts_ns":5,"payload":{},"payload_b64":"AA=="}\n',  # 6: both
            b'{"topic":"t","key":null,"ts_ns":6}\n',  # 7: neither
            b'{"topic":"t","key":null,"ts_ns":7,"payload_b64":"not base64!"}\n',  # 8
            b'{"topic":"\xff","key":null,"ts_ns":8,"payload":{}}\n',  # 9: not UTF-8
            b"[1, 2]\n",  # 10: not an object
            b"\n",  # 11: blank, ignored
            good % 12,
            b'{"topic":"t","key":null,"ts_ns":13,"payload":null,"payload_b64":"AA=="}\n',  # 13: fine
            good[:30],  # 14: cut mid-line, no newline
        ],
    )

    reader, records, errors = read_all(path)

    assert [r.ts_ns for r in records] == [1, 12, 13]
    assert records[2].value() == b"\0"
    assert (reader.records, reader.malformed, reader.truncated) == (3, 9, False)
    assert [line for line, _ in errors] == [3, 4, 5, 6, 7, 8, 9, 10, 14]
    reasons = dict(errors)
    assert "malformed" in reasons[3]
    assert "missing required field `key`" in reasons[4]
    assert "Expected `int`, got `str` - at `$.ts_ns`" in reasons[5]
    assert "exactly one of `payload` and `payload_b64`" in reasons[6]
    assert "exactly one of `payload` and `payload_b64`" in reasons[7]
    assert "`payload_b64` is not valid base64" in reasons[8]
    assert "utf-8" in reasons[9].lower()  # msgspec 0.23 says "UTF-8", earlier "utf-8"
    assert "Expected `object`, got `array`" in reasons[10]
    assert "truncated" in reasons[14]


def test_errors_are_logged_without_a_handler(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "bad.trace"
    write_lines(path, [HEADER, b"nonsense\n"])
    with caplog.at_level(logging.WARNING), TraceReader(path) as reader:
        assert list(reader) == []
    assert reader.malformed == 1
    assert f"{path}:2: skipped" in caplog.text


def test_truncated_gzip_yields_what_precedes_the_cut(tmp_path: Path) -> None:
    path = tmp_path / "cut.trace.gz"
    with TraceWriter(path, "test", T0) as writer:
        for i in range(20_000):
            writer.write_message(topics.PHASES, f"job{i}", T0 + i, PHASE)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])

    reader, records, errors = read_all(path)

    assert 0 < len(records) < 20_000
    assert [r.key for r in records] == [f"job{i}" for i in range(len(records))]
    assert reader.truncated
    assert reader.malformed == 1
    assert len(errors) == 1
    line, reason = errors[0]
    assert line == len(records) + 2
    assert "truncated or corrupt" in reason


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "line 1 is empty"),
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "line 1 is not a fabricwatch-trace header"),
        (b"[1, 2]\n", "line 1 is not a fabricwatch-trace header"),
        (b'{"topic":"fabric.counters","key":null,"ts_ns":1,"payload":{}}\n', "format is None"),
        (b'{"format":"otherformat","version":1}\n', "format is 'otherformat'"),
        (b'{"format":"fabricwatch-trace","version":2}\n', "unsupported trace version 2"),
        (b'{"format":"fabricwatch-trace","version":"1"}\n', "unsupported trace version '1'"),
        (b'{"format":"fabricwatch-trace","version":true}\n', "unsupported trace version True"),
        (b'{"format":"fabricwatch-trace","version":1,"created_ns":1}\n', "missing required field `source`"),
        (gzip.compress(HEADER * 100)[:15], "cannot read the header"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "x.trace"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=re.escape(problem)) as info:
        TraceReader(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_read_labels_returns_only_labels_in_order(tmp_path: Path) -> None:
    path = tmp_path / "labelled.trace.gz"
    second = Label(kind="benign", start_ns=T0 + 5, end_ns=T0 + 6, root=RootCause("spine01"))
    with TraceWriter(path, "test", T0) as writer:
        writer.write_message(topics.LABELS, None, T0, LABEL)
        writer.write_message(topics.COUNTERS, "leaf01", T0, SNAPSHOT)
        writer.write(topics.COUNTERS, "leaf01", T0, GARBAGE)
        writer.write_message(topics.LABELS, None, T0 + 5, second)
    assert read_labels(path) == [LABEL, second]


def test_record_needs_exactly_one_payload() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        TraceRecord(topics.COUNTERS, None, 1)


@pytest.mark.parametrize("name", ["big.trace", "big.trace.gz"])
def test_reading_memory_is_flat(tmp_path: Path, name: str) -> None:
    """200k records (~40 MB of JSON) must read in a few MB: replay takes traces of any length."""
    path = tmp_path / name
    with TraceWriter(path, "test", T0) as writer:
        for i in range(200_000):
            writer.write_message(topics.COUNTERS, "leaf01", T0 + i, SNAPSHOT)

    tracemalloc.start()
    try:
        with TraceReader(path) as reader:
            count = sum(1 for _ in reader)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == 200_000
    assert peak < 5_000_000, f"peak {peak / 1e6:.1f} MB while reading"


def test_documented_example_is_a_valid_trace(tmp_path: Path) -> None:
    block = re.search(r"```jsonl\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert block, "docs/trace-format.md lost its example"
    path = tmp_path / "doc.trace"
    path.write_text(block.group(1), encoding="utf-8")

    _, records, errors = read_all(path)

    assert errors == []
    decoded = [messages.decode(r.value()) for r in records if r.payload is not None]
    missing = set(typing.get_args(messages.Message)) - {type(m) for m in decoded}
    assert not missing, f"no documented example of {missing}"
    assert any(r.payload_b64 is not None for r in records)
    assert read_labels(path) == [m for m in decoded if isinstance(m, Label)]
