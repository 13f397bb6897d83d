"""The in-process pipeline runs stage 1 on the snapshots between two ticks at once, as a worker
runs a batch (issue 37): replay, ``evaluate`` and the demo take the same path, at half the time.
What it finds must be what it finds a snapshot at a time, every anomaly event in the same order."""

from __future__ import annotations

import msgspec
import pytest
from helpers.paths import SCENARIOS

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator.run import simulate
from fabricwatch.ingest.simulator.scenario import load_scenario
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CounterSpec, Snapshot, encode
from fabricwatch.schemas.topology import Device, Topology

NS = 1_000_000_000


@pytest.mark.parametrize("name", ["all_faults_100ms_32h", "job_health_1s_32h"])
def test_batches_between_ticks_find_what_a_snapshot_at_a_time_finds(tmp_path, name):
    trace = tmp_path / "trace"
    simulate(load_scenario(SCENARIOS / "eval" / f"{name}.yaml", {"duration": 60}), trace)
    one = replay_trace(trace, Pipeline(DetectorConfig(), batch_max=1))
    batched = replay_trace(trace, Pipeline(DetectorConfig()))
    assert one.anomalies, "the trace's faults fired nothing: it tests nothing"
    assert [msgspec.to_builtins(a) for a in batched.anomalies] == [
        msgspec.to_builtins(a) for a in one.anomalies
    ]
    assert batched.pipeline.stats == one.pipeline.stats
    assert batched.pipeline.stage1.rates.stats == one.pipeline.stage1.rates.stats


def test_snapshots_taken_before_a_message_reach_stage_1_before_it():
    """A batch ends where any other message comes: a topology (or a phase) that follows a poll is
    taken after that poll's rates, as one snapshot at a time would take it."""
    counters = [CounterSpec("rx_bytes")]
    order: list[str] = []
    pipeline = Pipeline(
        DetectorConfig(),
        on_frame=lambda f: order.append("rates"),
        on_context=lambda m: order.append("topology"),
    )
    for t in (1, 2):
        snap = Snapshot("h0/mlx5_0", "nic", t * NS, counters, ["1"], [[t * 1000]])
        pipeline.feed(topics.COUNTERS, t * NS, encode(snap))
    topology = Topology(ts_ns=2 * NS, devices=[Device("h0", "host")], links=[])
    pipeline.feed(topics.TOPOLOGY, 2 * NS, encode(topology))
    pipeline.finish()
    assert order == ["rates", "topology"]
