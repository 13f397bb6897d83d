"""Learned outliers: training time, model size, scoring throughput, and what the model costs stage 1.

Simulates baseline.yaml (untimed) and trains on it (timed: feature collection by replay, then the
fit). Then, in the same process, times stage 1 with and without the model on the same decoded
snapshots of outliers.yaml on a wider fabric (leaves of 64 ports; switch and NIC snapshots timed
apart, each poll's snapshots then one flush, as the pipeline's tick does), the forest alone at
several batch sizes, and a whole replay of outliers.yaml with and without the model. Simulated
counters, not random ones: random gauges would make every port an outlier and time symptom
formatting. Prints JSON lines.

    python bench/bench_outliers.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.outliers import FeatureCollector, OutlierDetector, OutlierModel
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Snapshot, Topology, decode
from fabricwatch.schemas.trace import TraceReader

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
WIDE = {"fabric": {"leaves": 4, "spines": 4, "hosts_per_leaf": 60}, "duration": 60}
"""64-port leaves (60 hosts + 4 uplinks), 240 NICs: the jobs of outliers.yaml keep their hosts."""


def train(trace: Path, config: DetectorConfig, tmp: Path) -> OutlierModel:
    start = time.perf_counter()
    collector = FeatureCollector()
    result = replay_trace(trace, Pipeline(config, outliers=collector))
    batches = collector.batches(result.pipeline.labels)
    collected = time.perf_counter()
    model = OutlierModel.fit(batches, config.outliers)
    fitted = time.perf_counter()
    path = tmp / "model.fwm"
    model.save(path)
    print(
        json.dumps(
            {
                "bench": "train",
                "rows": {name: len(X) for name, X in batches.items()},
                "collect_s": round(collected - start, 2),
                "fit_s": round(fitted - collected, 2),
                "model_bytes": path.stat().st_size,
            }
        ),
        flush=True,
    )
    return OutlierModel.load(path)


def polls_of(trace: Path, kind: str) -> tuple[Topology, list[list[Snapshot]]]:
    """The trace's snapshots of one device kind, decoded (untimed), grouped by poll."""
    topology, by_poll = None, {}
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic == topics.TOPOLOGY:
                topology = decode(rec.value(), Topology)
            elif rec.topic == topics.COUNTERS:
                snap = decode(rec.value(), Snapshot)
                if snap.device_kind == kind:
                    by_poll.setdefault(round(rec.ts_ns / 1e9), []).append(snap)
    return topology, [by_poll[k] for k in sorted(by_poll)]


def replicated(polls: list[list[Snapshot]], copies: int) -> list[list[Snapshot]]:
    """Each device ``copies`` times under other names: a worker that owns more devices per tick."""
    return [
        [msgspec.structs.replace(s, device=f"{s.device}#{k}") for s in poll for k in range(copies)]
        for poll in polls
    ]


def one_pass(topology: Topology, polls: list[list[Snapshot]], model: OutlierModel | None) -> float:
    """Seconds for one pass over the polls, each poll's devices then one flush (the pipeline's tick)."""
    stage1 = Stage1(outliers=OutlierDetector(model) if model is not None else None)
    stage1.set_topology(topology)
    start = time.perf_counter()
    for poll in polls:
        for snap in poll:
            stage1.process(snap)
        stage1.flush(poll[-1].ts_ns)
    return time.perf_counter() - start


def stage1_cost(trace: Path, kind: str, copies: int, model: OutlierModel, seconds: float) -> None:
    """Best of alternating passes without and with the model, so load from other processes on the
    machine hits both alike."""
    topology, polls = polls_of(trace, kind)
    polls = replicated(polls, copies)
    snaps = [s for poll in polls for s in poll]
    values = sum(len(s.ports) * len(s.counters) for s in snaps)
    without, with_model, spent = math.inf, math.inf, 0.0
    while spent < seconds:
        a, b = one_pass(topology, polls, None), one_pass(topology, polls, model)
        without, with_model, spent = min(without, a), min(with_model, b), spent + a + b
    print(
        json.dumps(
            {
                "bench": "stage1_outliers",
                "device_kind": kind,
                "snapshots_per_poll": len(polls[0]),
                "values_per_snapshot": round(values / len(snaps)),
                "values_per_s_without": round(values / without),
                "values_per_s_with": round(values / with_model),
                "time_ratio_with_over_without": round(with_model / without, 2),
                "us_per_snapshot_added": round((with_model - without) / len(snaps) * 1e6, 1),
            }
        ),
        flush=True,
    )


def forest_throughput(model: OutlierModel, seconds: float) -> None:
    m = model.classes["host_facing"]
    rng = np.random.default_rng(0)
    for rows in (1, 100, 4096):
        X = m.median + rng.random((rows, len(m.features)))
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 3:
            m.score(X)
            calls += 1
        elapsed = time.perf_counter() - start
        print(
            json.dumps(
                {
                    "bench": "forest_score",
                    "batch_rows": rows,
                    "trees": len(m.forest.trees),
                    "ms_per_call": round(elapsed / calls * 1e3, 3),
                    "rows_per_s": round(calls * rows / elapsed),
                }
            ),
            flush=True,
        )


def replay_cost(trace: Path, model: OutlierModel) -> None:
    timing = {}
    for label, detector in (("without", None), ("with", OutlierDetector(model))):
        result = replay_trace(trace, Pipeline(outliers=detector))
        timing[label] = result.wall_s
        values = result.pipeline.stats.values
    print(
        json.dumps(
            {
                "bench": "replay_outliers_yaml",
                "values_per_s_without": round(values / timing["without"]),
                "values_per_s_with": round(values / timing["with"]),
                "time_ratio_with_over_without": round(timing["with"] / timing["without"], 2),
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabricwatch-bench-") as tmp:
        base, faulty, wide = (Path(tmp) / f"{n}.trace.gz" for n in ("baseline", "outliers", "wide"))
        simulate(load_scenario(SCENARIOS / "baseline.yaml"), base)
        simulate(load_scenario(SCENARIOS / "outliers.yaml"), faulty)
        simulate(load_scenario(SCENARIOS / "outliers.yaml", overrides=WIDE), wide)
        model = train(base, DetectorConfig(), Path(tmp))
        for kind, copies in (("switch", 1), ("switch", 16), ("nic", 1)):
            stage1_cost(wide, kind, copies, model, args.seconds)
        forest_throughput(model, args.seconds)
        replay_cost(faulty, model)


if __name__ == "__main__":
    main()
