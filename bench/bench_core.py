"""Throughput and memory of the whole detection core (decode, stage 1, stage 2) in one process.

Simulates a scenario to a temporary trace (untimed), reads its records into memory in chunks
(untimed: file reading and gunzip are not the core), and times only Pipeline.feed over them, on one
core. Then, in a second pass under tracemalloc, measures what the pipeline's state holds at the end
and at the half-way point: state that grows with the number of ports only is the same at both
points, and the same per port at two fabric sizes. Prints JSON lines.

    python bench/bench_core.py [--scenario FILE ...] [--duration S] [--model MODEL]

Without --scenario it runs the suite's largest fabric (1,024 hosts). With --model it runs each
scenario twice, without and with learned-outlier scoring, in the same process.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas.trace import TraceReader

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
CHUNK = 20_000


def chunks(trace: Path) -> Iterator[list[tuple[str, int, bytes]]]:
    with TraceReader(trace) as reader:
        batch = []
        for rec in reader:
            batch.append((rec.topic, rec.ts_ns, rec.value()))
            if len(batch) == CHUNK:
                yield batch
                batch = []
        if batch:
            yield batch


def new_pipeline(model: Path | None) -> Pipeline:
    if model is None:
        return Pipeline()
    from fabricwatch.detectors.outliers import OutlierDetector, OutlierModel

    config = DetectorConfig()
    return Pipeline(config, outliers=OutlierDetector(OutlierModel.load(model), config.outliers))


def throughput(trace: Path, model: Path | None) -> tuple[Pipeline, float]:
    pipeline, core_s = new_pipeline(model), 0.0
    for batch in chunks(trace):
        feed = pipeline.feed
        start = time.perf_counter()
        for topic, ts, value in batch:
            feed(topic, ts, value)
        core_s += time.perf_counter() - start
    start = time.perf_counter()
    pipeline.finish()
    return pipeline, core_s + time.perf_counter() - start


def state_bytes(trace: Path, records: int, model: Path | None) -> tuple[int, int]:
    """Traced memory held by the pipeline half-way and at the end of the trace."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    pipeline, n, half, batch = new_pipeline(model), 0, 0, []
    for batch in chunks(trace):
        for topic, ts, value in batch:
            pipeline.feed(topic, ts, value)
            n += 1
            if n == records // 2:
                half = _held(base, batch)
    end = _held(base, batch)
    tracemalloc.stop()
    del pipeline
    return half, end


def _held(base: int, batch: list) -> int:
    """Traced memory now, less the baseline and the records chunk in flight (input, not state)."""
    in_flight = sum(len(v) for _, _, v in batch)
    return tracemalloc.get_traced_memory()[0] - base - in_flight


def ports_of(pipeline: Pipeline) -> int:
    return sum(len(s.ports) for s in pipeline.stage1.rates._devices.values())


def run(scenario_path: Path, duration: float | None, model: Path | None) -> dict:
    overrides = {"duration": duration} if duration else None
    scenario = load_scenario(scenario_path, overrides)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "core.trace"
        simulate(scenario, trace)
        pipeline, core_s = throughput(trace, model)
        s = pipeline.stats
        ports = ports_of(pipeline)
        half, end = state_bytes(trace, s.records, model)
    return {
        "bench": "core",
        "scenario": scenario.name,
        "outlier_model": model is not None,
        "simulated_s": scenario.duration,
        "devices": len(pipeline.stage1.rates._devices),
        "ports": ports,
        "snapshots": s.snapshots,
        "values": s.values,
        "core_s": round(core_s, 2),
        "values_per_s": round(s.values / core_s),
        "snapshots_per_s": round(s.snapshots / core_s),
        "anomalies": s.anomalies,
        "state_bytes_half_way": half,
        "state_bytes_end": end,
        "state_bytes_per_port": round(end / ports),
        "target_values_per_s": 1_000_000,
        "meets_target": s.values / core_s >= 1_000_000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", type=Path, action="append", default=None)
    parser.add_argument("--duration", type=float, default=None, help="override the scenarios' duration (s)")
    parser.add_argument("--model", type=Path, default=None, help="score with this outlier model too")
    args = parser.parse_args()
    for path in args.scenario or [SCENARIOS / "eval" / "all_faults_1024h.yaml"]:
        print(json.dumps(run(path, args.duration, None)), flush=True)
        if args.model is not None:
            print(json.dumps(run(path, args.duration, args.model)), flush=True)


if __name__ == "__main__":
    main()
