"""What a burst capture costs a host: CPU per interface sampled at 1 ms and at 100 µs, and how
close to the period the samples land.

Captures this machine's loopback (any interface's statistics cost the same to read) for
``--seconds`` at each period, and, as the baseline, sleeps as long. CPU is this process's; the
share is CPU seconds over wall seconds (1.0: a whole core). Prints JSON lines.

    python bench/bench_burst.py [--seconds 2] [--netdev lo]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fabricwatch.ingest.nic.burst import capture


def measure(netdev: str, period_s: float | None, seconds: float) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    if period_s is None:
        time.sleep(seconds)
        samples, late = 0, []
    else:
        cap = capture(netdev, period_s, seconds)
        samples = len(cap.t_ns)
        late = np.diff(cap.t_ns) / 1e9 - period_s
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "bench": "burst_capture",
        "netdev": netdev,
        "period_us": None if period_s is None else round(period_s * 1e6),
        "samples": samples,
        "cpu_share": round(cpu / wall, 3),
        "p99_late_us": round(float(np.quantile(late, 0.99)) * 1e6, 1) if len(late) else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--netdev", default="lo")
    args = ap.parse_args()
    base = measure(args.netdev, None, args.seconds)
    print(json.dumps(base))
    for period in (1e-3, 100e-6):
        row = measure(args.netdev, period, args.seconds)
        row["cpu_share_over_sleep"] = round(row["cpu_share"] - base["cpu_share"], 3)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
