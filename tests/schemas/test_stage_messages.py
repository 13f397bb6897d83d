"""What a stage-1 batch sends: one rates message per input partition and one symptoms message per
pod, whose items stage 2 takes exactly as it would take them one message each."""

from __future__ import annotations

import zlib

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.summary import RATES_BATCH_ROWS
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    RatesBatch,
    Symptom,
    SymptomBatch,
    Topology,
    Watermark,
    decode,
    decode_rates,
    encode,
)
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams import stages
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker

SOURCES = [f"{topics.COUNTERS}/{i}" for i in range(3)]


def batch_of(demo_trace, n: int) -> tuple[Stage1Worker, list[bytes], list[str]]:
    stage1 = Stage1Worker(DetectorConfig())
    values, sources = [], []
    with TraceReader(demo_trace) as reader:
        for rec in reader:
            if rec.topic == topics.TOPOLOGY:
                stage1.set_topology(decode(rec.value(), Topology))
            elif rec.topic == topics.COUNTERS and len(values) < n:
                values.append(rec.value())
                sources.append(SOURCES[zlib.crc32(rec.key.encode()) % len(SOURCES)])
    return stage1, values, sources


def test_a_batch_sends_a_rates_message_per_partition_and_a_symptoms_message_per_pod(demo_trace):
    stage1, values, sources = batch_of(demo_trace, 3_000)
    out = stage1.process(values, sources)
    assert sorted({k.key.decode() for k in out.rates}) == SOURCES
    assert all(len(decode(k.value, RatesBatch).ports) <= RATES_BATCH_ROWS for k in out.rates)
    devices = [r.device for k in out.rates for r in decode_rates(k.value)]
    assert len(devices) > 1_000 and len(set(devices)) < len(devices)  # each device's polls, in order
    pods = [k.key for k in out.symptoms]
    assert len(pods) == len(set(pods)) == len(stage1._pod_keys)
    for k in out.symptoms:
        items = decode(k.value, SymptomBatch).items
        marks = [i for i in items if isinstance(i, Watermark)]
        assert sorted(m.source for m in marks) == SOURCES
        assert all(isinstance(i, Symptom) for i in items[: len(items) - len(marks)])  # marks last


def test_a_pods_items_past_the_limit_go_in_order_in_more_messages(demo_trace, monkeypatch):
    stage1, values, sources = batch_of(demo_trace, 3_000)
    whole = stage1.process(values, sources).symptoms
    monkeypatch.setattr(stages, "SYMPTOM_BATCH_ITEMS", 2)
    stage1, values, sources = batch_of(demo_trace, 3_000)
    split = stage1.process(values, sources).symptoms
    assert len(split) > len(whole)

    def items(keyed: list[stages.Keyed]) -> dict[bytes, list]:
        out: dict[bytes, list] = {}
        for k in keyed:
            out.setdefault(k.key, []).extend(decode(k.value, SymptomBatch).items)
        return out

    assert items(split) == items(whole)


def test_stage2_takes_a_batch_as_its_items_one_by_one():
    def stage2() -> Stage2Worker:
        return Stage2Worker(DetectorConfig(), stall_after_s=30)

    symptom = Symptom("pfc_storm", "leaf00", ts_ns=10_000, start_ns=10_000, port="Ethernet0")
    items = [Watermark("a", 5_000), Watermark("b", 5_000), symptom, Watermark("a", 20_000)]
    one_by_one, batched = stage2(), stage2()
    for item in items:
        one_by_one.feed(encode(item), now=1.0)
    assert batched.feed(encode(SymptomBatch(items)), now=1.0) == ([], None)
    assert batched.held == one_by_one.held == 1  # b has not passed the symptom in either
    assert batched.taken == one_by_one.taken == 4
    batched.feed(encode(SymptomBatch([Watermark("b", 30_000)])), now=2.0)
    assert batched.held == 0
