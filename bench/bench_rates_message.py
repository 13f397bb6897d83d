"""What the storage message (``fabric.rates``) costs stage 1, by encoding of ``PortRates.values``.

Stage 1 alone (``Stage1Worker.process`` in batches of 500, as the worker runs it) over a simulated
scenario's snapshots, three ways in the same process, best of 3: rates as float64 bytes (what is
published), as rows of JSON numbers (what earlier builds published), and with no rates message.

Run: ``python bench/bench_rates_message.py [--scenario large.yaml] [--duration 30]``. Prints one
JSON line: counter values/s for each, and the ratios. Five runs gave bytes / rows of numbers
between 0.85 and 1.15: no difference stage 1 can see on this machine; the bytes pay off in the
sink, which decodes them 4-5x faster (``bench/bench_clickhouse.py``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_clickhouse import as_rows_of_numbers

import fabricwatch.streams.stages as stages
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.detectors.summary import summarise
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import PortRates, Snapshot, Topology, decode
from fabricwatch.schemas.trace import TraceReader

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def rows_of_numbers(frame: RateFrame, line_bytes_ps: np.ndarray | None = None) -> PortRates:
    """``summarise`` as earlier builds wrote it (by way of the bytes: one 8 KB copy more per
    message, against ~1,000 Python floats)."""
    return as_rows_of_numbers(summarise(frame, line_bytes_ps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="large.yaml")
    parser.add_argument("--duration", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rates-") as tmp:
        trace = Path(tmp) / "t.trace.gz"
        simulate(load_scenario(SCENARIOS / args.scenario, {"duration": args.duration}), trace)
        topology, values = None, []
        with TraceReader(trace) as reader:
            for rec in reader:
                if rec.topic == topics.TOPOLOGY:
                    topology = decode(rec.value(), Topology)
                elif rec.topic == topics.COUNTERS:
                    values.append(rec.value())
    counted = sum(len(s.ports) * len(s.counters) for s in (decode(v, Snapshot) for v in values))
    ways = (
        ("bytes", summarise, True),
        ("rows_of_numbers", rows_of_numbers, True),
        ("none", summarise, False),
    )
    best: dict[str, float] = {}
    for _ in range(3):
        for label, summarise_fn, rates in ways:
            stages.summarise = summarise_fn  # the name Stage1Worker calls
            worker = stages.Stage1Worker(DetectorConfig(), rates=rates)
            worker.set_topology(topology)
            started = time.perf_counter()
            for i in range(0, len(values), 500):
                batch = values[i : i + 500]
                worker.process(batch, ["c/0"] * len(batch))
            best[label] = max(best.get(label, 0.0), counted / (time.perf_counter() - started))
    stages.summarise = summarise
    out = {"bench": "rates_message", "scenario": args.scenario, "messages": len(values), "values": counted}
    out |= {f"{k}_values_per_s": round(v) for k, v in best.items()}
    out["bytes_vs_rows_of_numbers"] = round(best["bytes"] / best["rows_of_numbers"], 2)
    out["share_of_stage1_bytes"] = round(1 - best["bytes"] / best["none"], 2)
    out["share_of_stage1_rows_of_numbers"] = round(1 - best["rows_of_numbers"] / best["none"], 2)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
