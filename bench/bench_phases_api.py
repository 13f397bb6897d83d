"""What a mark costs a training loop: ``fabricwatch.phases.collective`` called 100,000 times in a
loop, against the same loop without it, while the marking thread drains and coalesces beside it
(writing a trace). Prints JSON lines; the figure is the best of ``--repeat`` runs.

    python bench/bench_phases_api.py [--calls 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import fabricwatch.phases as phases


def loop(calls: int, mark: bool) -> float:
    collective = phases.collective
    began = time.perf_counter()
    if mark:
        for _ in range(calls):
            collective("AllReduce", 1 << 20, "dp")
    else:
        for _ in range(calls):
            pass
    return time.perf_counter() - began


def _drained(timeout_s: float = 30.0) -> None:
    stop = time.monotonic() + timeout_s
    while phases.pending() and time.monotonic() < stop:
        time.sleep(0.01)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100_000, help="marks per run (default: 100000)")
    p.add_argument("--repeat", type=int, default=5, help="runs; the best is reported (default: 5)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fw-bench-api-") as tmp:
        phases.start(job="bench", out=str(Path(tmp) / "marks.trace"), interval_s=0.05)
        try:
            runs = []
            for _ in range(args.repeat):
                runs.append(loop(args.calls, True))
                _drained()  # each run starts with an empty queue: a mark is never a drop here
            marked = min(runs)
            bare = min(loop(args.calls, False) for _ in range(args.repeat))
        finally:
            stats = phases.stop()
    print(
        json.dumps(
            {
                "bench": "phases_api_mark",
                "calls": args.calls,
                "us_per_mark": round((marked - bare) / args.calls * 1e6, 3),
                "bare_loop_us_per_iteration": round(bare / args.calls * 1e6, 4),
                "marked": stats.marked,
                "dropped": stats.dropped,
                "phases_sent": stats.phases,
            }
        )
    )


if __name__ == "__main__":
    main()
