"""The streaming stages without a broker: whatever order partitions arrive in, the anomalies match
the in-process pipeline's."""

from __future__ import annotations

import time

import pytest
from helpers import small_fabric
from helpers.stages import in_process, live, partition_of, streamed, topology_late
from helpers.streaming import LOSSY_LINKS

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.ticks import Ticker
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    Symptom,
    SymptomBatch,
    Topology,
    Watermark,
    decode,
    decode_rates,
    encode,
)
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.stages import Stage1Worker, Stage2Worker

pytestmark = pytest.mark.slow  # whole scenarios through both stages


@pytest.mark.parametrize(("batch", "order"), [(1, "time"), (500, "time"), (500, "partition by partition")])
def test_streamed_stages_fire_what_the_pipeline_fires(demo_trace, batch, order):
    expected = in_process(demo_trace)
    got, stage2 = streamed(demo_trace, batch, order)
    firing = [e for e in expected if e[1] == "firing"]
    assert firing and [e for e in got if e[1] == "firing"] == firing
    assert [e for e in got if e[1] == "resolved"] == [e for e in expected if e[1] == "resolved"]
    assert stage2.held == 0


@pytest.mark.parametrize("lag_s", [0.0, 1.5, 3.0])
def test_a_link_whose_symptoms_come_late_still_explains_the_retransmissions_it_causes(tmp_path, lag_s):
    """Issue 34, found in CI through two workers under load: the partitions of a lossy link's two
    ends came a second or more behind the one of a NIC resending because of it, caught up all the
    while, so projected time passed the NIC's poll of waiting and it fired alone. Waiting in
    settled time, it folds into the link's incident as in process."""
    small_fabric.replayed(
        tmp_path,
        "late_link",
        "  - {kind: lossy_link, device: h003, loss_rate: 0.0001, start: 10.3, duration: 20}",
        34,
        40,
    )
    path = tmp_path / "late_link.trace.gz"
    late = {partition_of("h003/mlx5_0"), partition_of("leaf00")}
    assert len(late | {partition_of("h002/mlx5_0"), partition_of("h004/mlx5_0")}) == 4  # the echoes on time
    expected = {(k, d) for k, status, d, _ in in_process(path) if status == "firing"}
    assert expected == {("link_corruption", "h003/mlx5_0")}
    got = {(k, d) for k, status, d, _ in live(path, late, lag_s, from_s=11.5) if status == "firing"}
    assert got == expected


@pytest.mark.parametrize("late_by_s", [0.2, 4.5])
def test_a_pod_waits_for_every_input_partition_before_time_moves(tmp_path, late_by_s):
    """Issue 34, found through two workers under load: the worker reading the lossy link's two ends
    read the topology and its partitions a moment after the other worker's output had reached
    stage 2. Stage 2 had started long before, so its startup wait was over, and a partition it had
    never heard from held nothing back: time moved on without the link's symptoms (the link missed,
    or a NIC's retransmissions fired alone). Each symptoms partition now waits, from its first
    message, for a watermark from every input partition."""
    scenario = tmp_path / "lossy.yaml"
    scenario.write_text(LOSSY_LINKS)
    path = tmp_path / "lossy.trace.gz"
    simulate(load_scenario(scenario), path)
    late = {partition_of("h003/mlx5_0"), partition_of("leaf00")}
    expected = {(k, d) for k, status, d, _ in in_process(path) if status == "firing"}
    assert ("link_corruption", "h003/mlx5_0") in expected
    got = {(k, d) for k, status, d, _ in topology_late(path, late, late_by_s) if status == "firing"}
    assert got == expected


def test_a_stalled_partition_holds_symptoms_until_its_watermark_passes():
    stage2 = Stage2Worker(DetectorConfig(), stall_after_s=30)
    mark = lambda src, ts, caught_up=False: encode(Watermark(src, ts, caught_up))  # noqa: E731
    symptom = encode(Symptom("pfc_storm", "leaf00", ts_ns=10_000, start_ns=10_000, port="Ethernet0"))
    stage2.feed(mark("a", 5_000), now=0.0)
    stage2.feed(mark("b", 5_000), now=0.0)
    stage2.feed(mark("a", 20_000), now=1.0)
    stage2.feed(symptom, now=1.0)
    assert stage2.held == 1  # partition b has not reached 10_000 yet: b's symptoms may be on the way
    stage2.advance(now=20.0)
    assert stage2.held == 1  # b's worker may be dead: wait for the takeover, up to stall_after_s
    stage2.advance(now=40.0)
    assert stage2.held == 0  # b made no progress for 30 s: stop waiting


def test_a_caught_up_partition_holds_nothing_back_while_its_worker_says_so():
    stage2 = Stage2Worker(DetectorConfig(), heartbeat_s=2)
    symptom = encode(Symptom("pfc_storm", "leaf00", ts_ns=10_000, start_ns=10_000, port="Ethernet0"))
    stage2.feed(encode(Watermark("a", 20_000)), now=0.0)
    stage2.feed(encode(Watermark("b", 5_000, caught_up=True)), now=0.0)
    stage2.feed(symptom, now=0.5)
    assert stage2.held == 0


def test_a_caught_up_partition_behind_the_others_holds_their_symptoms_until_it_moves_or_goes_quiet():
    """Read to its end is a claim about the moment the worker asked: the producer may still hold
    the partition's next records while other partitions have moved past them."""
    stage2 = Stage2Worker(DetectorConfig(), heartbeat_s=2, quiet_after_s=2)
    s = 1_000_000_000
    symptom = encode(Symptom("pfc_storm", "leaf00", ts_ns=60 * s, start_ns=60 * s, port="Ethernet0"))
    stage2.feed(encode(Watermark("nic", 50 * s, caught_up=True)), now=0.0)
    stage2.feed(encode(Watermark("leaf", 61 * s, caught_up=True)), now=0.0)
    stage2.feed(symptom, now=0.1)
    assert stage2.held == 1  # the NIC's records of 50-60 s may still be on their way
    stage2.feed(encode(Watermark("nic", 55 * s, caught_up=True)), now=0.5)
    assert stage2.held == 1
    stage2.feed(encode(Watermark("nic", 60 * s, caught_up=True)), now=0.6)
    assert stage2.held == 0
    stage2.feed(symptom, now=0.7)  # behind the released time: taken at once
    assert stage2.held == 0


def test_a_caught_up_partition_that_went_quiet_stops_holding_the_others_back():
    stage2 = Stage2Worker(DetectorConfig(), heartbeat_s=2, quiet_after_s=2)
    s = 1_000_000_000
    stage2.feed(encode(Watermark("gone", 50 * s, caught_up=True)), now=0.0)
    stage2.feed(encode(Watermark("live", 61 * s, caught_up=True)), now=0.0)
    symptom = Symptom("pfc_storm", "leaf00", ts_ns=60 * s, start_ns=60 * s, port="Ethernet0")
    stage2.feed(encode(symptom), now=0.1)
    stage2.feed(encode(Watermark("gone", 50 * s, caught_up=True)), now=1.5)
    assert stage2.held == 1
    stage2.feed(encode(Watermark("gone", 50 * s, caught_up=True)), now=2.1)  # unmoved for 2 s: quiet
    assert stage2.held == 0


DEEP_FIELD = b'"extra":' + b"[" * 3000 + b"]" * 3000
"""An unknown field 6 KB long nested 3,000 deep: more than the decoder's stack takes."""
DEEP = b'{"type":"snapshot",' + DEEP_FIELD + b"}"


def test_bad_symptom_messages_are_rejected_with_a_reason():
    stage2 = Stage2Worker(DetectorConfig())
    assert stage2.feed(b"{", now=0.0)[1].startswith("not valid JSON")
    assert stage2.feed(b"", now=0.0)[1] == "empty message"
    assert "Expected" in stage2.feed(b'{"type":"symptom","kind":1}', now=0.0)[1]
    deep_symptom = b'{"type":"symptom",' + DEEP_FIELD + b"}"
    assert stage2.feed(deep_symptom, now=0.0)[1] == "not valid JSON: nested too deeply"


def test_stage1_rejects_oversized_and_malformed_snapshots_and_goes_on(demo_trace):
    stage1 = Stage1Worker(DetectorConfig(), max_message_bytes=100_000)
    with TraceReader(demo_trace) as reader:
        good = next(r.value() for r in reader if r.topic == topics.COUNTERS)
    out = stage1.process([b"x" * 100_001, b'{"type":"snapshot"}', DEEP, good], ["c/0"] * 4)
    assert [r.index for r in out.rejected] == [0, 1, 2]
    assert out.rejected[2].reason == "not valid JSON: nested too deeply"
    assert out.rejected[0].reason == "oversized: 100001 bytes > limit 100000"
    assert "missing required field" in out.rejected[1].reason
    assert out.values > 0


def test_ticker_evaluates_before_the_record_that_crosses_a_tick():
    t = Ticker(tick_s=1.0)
    assert t.due(0) is None
    t.seen(0)
    t.seen(500_000_000)
    assert t.due(900_000_000) is None
    assert t.due(1_000_000_000) == 500_000_000


def test_a_jump_of_months_in_input_time_is_quick_and_resolves_what_was_open():
    stage2 = Stage2Worker(DetectorConfig())
    start = 1_000_000_000_000
    for i in range(5):
        ts = start + i * 1_000_000_000
        stage2.feed(encode(Symptom("incast", "leaf00", ts, start, port="Ethernet8", priority=3)), now=0.0)
        stage2.feed(encode(Watermark("a", ts)), now=0.0)
    months = start + 300 * 86_400 * 1_000_000_000
    began = time.perf_counter()
    fired, _ = stage2.feed(encode(Watermark("a", months)), now=1.0)
    assert time.perf_counter() - began < 1.0
    assert [a.status for a in fired if a.kind == "incast"] == ["resolved"]


def test_stage1_publishes_rates_with_utilisation_against_the_topology_line_rates(demo_trace):
    stage1 = Stage1Worker(DetectorConfig())
    values = []
    with TraceReader(demo_trace) as reader:
        for rec in reader:
            if rec.topic == topics.TOPOLOGY:
                stage1.set_topology(decode(rec.value(), Topology))
            elif rec.topic == topics.COUNTERS and len(values) < 2_000:
                values.append(rec.value())
    out = stage1.process(values, ["c/0"] * len(values))
    rates = [r for k in out.rates for r in decode_rates(k.value)]
    assert rates and {k.key for k in out.rates} == {b"c/0"}  # keyed by the partition read
    nic = next(r for r in rates if r.device_kind == "nic")
    util = nic.matrix()[0, nic.columns.index("tx_util")]
    assert 0 <= util <= 1.05


def _silent(out_symptoms) -> list[tuple[str, bool, str]]:
    items = [i for k in out_symptoms for i in decode(k.value, SymptomBatch).items]
    return [
        (s.device, s.active, str(s.evidence.get("cleared", "")))
        for s in items
        if getattr(s, "kind", "") == "device_silent"
    ]


def test_a_device_gone_dark_is_reported_and_cleared_when_its_partition_goes_to_another_worker(demo_trace):
    stage1 = Stage1Worker(DetectorConfig())
    dark, found = "h002/mlx5_0", []

    def source(device: str) -> str:  # h00x on one partition, the rest on another
        return "c/1" if device.startswith("h00") else "c/0"

    with TraceReader(demo_trace) as reader:
        records = [r for r in reader if r.topic == topics.COUNTERS]
    start = records[0].ts_ns
    for i in range(0, len(records), 500):
        chunk = [r for r in records[i : i + 500] if r.key != dark or r.ts_ns - start < 20 * 10**9]
        out = stage1.process([r.value() for r in chunk], [source(r.key) for r in chunk])
        found += _silent(out.symptoms)
    assert found and {f[:2] for f in found} == {(dark, True)}  # repeated while dark, nobody else
    stage1.keep_sources({"c/0"})  # a rebalance gave c/1 to another worker
    handed = _silent(stage1.heartbeat({"c/0": True}))
    assert handed == [(dark, False, "handed over")]  # only this worker could clear it
    out = stage1.process([r.value() for r in records[-50:]], ["c/0"] * 50)
    assert _silent(out.symptoms) == []


def test_a_partition_read_behind_the_others_holds_devices_that_are_late_not_dark(demo_trace):
    """Found: after a rebalance one partition's backlog was read 10 s and more behind the others,
    and every device on it was reported silent while its polls were merely still to be read."""
    stage1 = Stage1Worker(DetectorConfig())
    with TraceReader(demo_trace) as reader:
        records = [r for r in reader if r.topic == topics.COUNTERS]
    start = records[0].ts_ns

    def part(r, lo_s: float, hi_s: float, on_c1: bool) -> bool:
        return lo_s * 10**9 <= r.ts_ns - start < hi_s * 10**9 and r.key.startswith("h00") == on_c1

    found = []
    for lo, hi in ((0, 5), (5, 40)):  # c/0 runs 35 s ahead; then c/1's backlog comes in
        for on_c1 in (False, True):
            chunk = [r for r in records if part(r, lo, hi, on_c1)]
            out = stage1.process([r.value() for r in chunk], ["c/1" if on_c1 else "c/0"] * len(chunk))
            found += _silent(out.symptoms)
    assert found == []
