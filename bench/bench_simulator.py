"""How fast the simulator turns a scenario into a trace: the 256-host, 10-minute ``large.yaml``.

Target: under 30 s of wall time on one core for the plain trace. Each run is a fresh process, so
peak RSS is the simulator's own (not the sum of runs). Prints one JSON object per measurement.

Run: ``python bench/bench_simulator.py [--scenario FILE] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path

from children import answer

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "large.yaml"
TARGET_SECONDS = 30.0


def _measure(scenario: str, out: str, conn: Connection) -> None:
    from fabricwatch.ingest.simulator import load_scenario, simulate

    stats = simulate(load_scenario(Path(scenario)), Path(out))
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send(
        {**stats.__dict__, "peak_rss_mb": round(peak_kb / 1024, 1), "trace_bytes": Path(out).stat().st_size}
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    ok = True
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".trace", ".trace.gz"):
            for _ in range(args.repeat):
                out = Path(tmp) / f"bench{suffix}"
                here, there = ctx.Pipe()
                proc = ctx.Process(target=_measure, args=(str(args.scenario), str(out), there))
                proc.start()
                r = answer(proc, here, "the simulating child")
                proc.join()
                out.unlink()
                wall = r["wall_seconds"]
                result = {
                    "bench": "simulate",
                    "scenario": args.scenario.stem,
                    "output": suffix,
                    "wall_s": round(wall, 2),
                    "simulated_s": r["simulated_seconds"],
                    "snapshots": r["snapshots"],
                    "values": r["values"],
                    "snapshots_per_s": round(r["snapshots"] / wall),
                    "values_per_s": round(r["values"] / wall),
                    "trace_mb": round(r["trace_bytes"] / 2**20, 1),
                    "peak_rss_mb": r["peak_rss_mb"],
                    "target_s": TARGET_SECONDS,
                    "meets_target": wall < TARGET_SECONDS,
                }
                ok &= suffix != ".trace" or result["meets_target"]
                print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
