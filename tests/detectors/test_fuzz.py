"""Thousands of malformed messages of every kind (``malformed.py``) against the decoder, the trace
reader and the in-process pipeline: nothing crashes, every bad message is dead-lettered or
reported with its reason, and the clean run's anomalies come out unchanged."""

from __future__ import annotations

import random

import pytest
from helpers.malformed import KINDS, generate, make

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import DecodeError, Phase, Snapshot, Topology, decode
from fabricwatch.schemas.trace import TraceReader, TraceWriter

BAD_PER_KIND = 160  # 2,080 malformed messages in all
_TYPES = (Snapshot, Phase, Topology)


@pytest.fixture(scope="module")
def real(demo_trace) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    with TraceReader(demo_trace) as reader:
        for r in reader:
            out.setdefault(r.topic, []).append(r.value())
    return out


def test_the_decoder_raises_nothing_but_decode_errors(real):
    samples = real[topics.COUNTERS][::50] + real[topics.PHASES][:20] + real[topics.TOPOLOGY]
    seen = dict.fromkeys(KINDS, 0)
    for kind, value in generate(samples, BAD_PER_KIND * len(KINDS), seed=1):
        for expected in (None, *_TYPES):
            try:
                decode(value, expected)
            except DecodeError as exc:
                assert str(exc)  # with its reason
                seen[kind] += 1
    assert all(seen[k] for k in KINDS if k not in {"duplicate_ts", "backward_ts", "future_ts"})


def test_the_trace_reader_skips_and_counts_every_bad_line(tmp_path, real):
    path = tmp_path / "bad.trace"
    bad = [v for _, v in generate(real[topics.COUNTERS][::20], 1000, seed=2)]
    with TraceWriter(path, "fuzz", 0) as w:
        for i, value in enumerate(bad):
            w.write(topics.COUNTERS, f"k{i}", i, value)
    lines = path.read_bytes().splitlines(keepends=True)
    rng = random.Random(3)
    broken = [_break_line(rng, line) for line in lines[1:]]  # the records themselves, not only payloads
    path.write_bytes(lines[0] + b"".join(broken))
    reasons: list[str] = []
    with TraceReader(path, on_error=lambda line, reason: reasons.append(reason)) as reader:
        got = sum(1 for _ in reader)
    assert got + reader.malformed == len(lines) - 1 and reader.malformed == len(reasons) > 0


def test_the_pipeline_dead_letters_every_bad_snapshot_and_finds_what_it_found(tmp_path, demo_trace):
    clean = replay_trace(demo_trace, Pipeline(DetectorConfig()), lambda events: None)
    expected = [(a.kind, a.status, a.root.device, a.start_ns) for a in clean.anomalies]
    assert {a[0] for a in expected} >= {"incast", "pfc_storm"}

    rng = random.Random(4)
    pipeline = Pipeline(DetectorConfig())
    fired = []
    bad = undecodable = 0
    with TraceReader(demo_trace) as reader:
        for n, rec in enumerate(reader):
            fired += pipeline.feed(rec.topic, rec.ts_ns, rec.value(), f"clean:{n}")
            if rec.topic != topics.COUNTERS or n % 3:
                continue
            kind = KINDS[bad % len(KINDS)]
            value = make(kind, rec.value(), rng, bad)  # broken from what was just delivered
            bad += 1
            try:
                decode(value, _TYPES[0])
            except DecodeError:
                undecodable += 1
            fired += pipeline.feed(rec.topic, rec.ts_ns, value, f"bad:{bad}")
    fired += pipeline.finish()
    assert bad >= 1000
    assert [(a.kind, a.status, a.root.device, a.start_ns) for a in fired] == expected
    letters = pipeline.dead_letters
    assert all(dl.where.startswith("bad:") and dl.reason for dl in letters)
    # Every undecodable one, plus the future-stamped ones held and then dropped; the first 1,000
    # are kept with their reasons, all are counted.
    assert pipeline.stats.dead_letters >= undecodable
    assert len(letters) == min(pipeline.max_dead_letters_kept, pipeline.stats.dead_letters)


def test_bad_phases_and_topologies_cost_only_themselves(real, demo_trace):
    pipeline = Pipeline(DetectorConfig())
    rng = random.Random(5)
    with TraceReader(demo_trace) as reader:
        records = list(reader)
    for n, rec in enumerate(records):
        pipeline.feed(rec.topic, rec.ts_ns, rec.value(), f"clean:{n}")
        if rec.topic in (topics.PHASES, topics.TOPOLOGY):
            for i, kind in enumerate(KINDS):
                pipeline.feed(rec.topic, rec.ts_ns, make(kind, rec.value(), rng, n * 100 + i), "bad")
    pipeline.finish()
    assert pipeline.stats.dead_letters > 0 and all(dl.where == "bad" for dl in pipeline.dead_letters)


def _break_line(rng: random.Random, line: bytes) -> bytes:
    """A trace line cut, flipped or nested, or left alone (so some records still read)."""
    choice = rng.randrange(4)
    if choice == 0:
        return line[: rng.randrange(1, len(line))] + b"\n"
    if choice == 1:
        data = bytearray(line[:-1])
        data[rng.randrange(len(data))] ^= 0x80
        return bytes(data) + b"\n"
    if choice == 2:
        return b'{"topic":"x","payload":' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    return line
