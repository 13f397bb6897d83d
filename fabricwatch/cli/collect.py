"""``fabricwatch collect``: this host's RDMA NICs into a trace file."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fabricwatch.schemas import topics
from fabricwatch.schemas.trace import TraceWriter

HELP = "poll this host's RDMA NICs into a trace file"
DESCRIPTION = """Poll this host's RDMA NICs (sysfs counters and hw_counters, plus ethtool -S for the
PFC counters) every --interval seconds into a trace that replay reads."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help=HELP, description=DESCRIPTION)
    p.add_argument("--out", type=Path, required=True, help="trace file to write (.gz to compress)")
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between polls, 0.1 to 10 (default: 1)"
    )
    p.add_argument("--count", type=int, default=None, help="stop after this many polls (default: Ctrl-C)")
    p.add_argument(
        "--device", action="append", default=None, help="RDMA device, e.g. mlx5_0 (repeatable; default: all)"
    )
    p.add_argument(
        "--sysfs-root", type=Path, default=Path("/sys"), help="where sysfs is mounted (default: /sys)"
    )
    p.add_argument("--host", default=None, help="host name in device ids (default: this host's)")
    p.add_argument("--no-ethtool", action="store_true", help="sysfs counters only (no PFC counters)")


def run(args: argparse.Namespace) -> int:
    from fabricwatch.ingest.collect import discover, poll
    from fabricwatch.ingest.host_collector import run_ethtool

    if not 0.1 <= args.interval <= 10:
        raise ValueError(f"--interval {args.interval}: must be between 0.1 and 10 seconds")
    targets = discover(args.sysfs_root, args.device)
    ethtool = None if args.no_ethtool else run_ethtool
    meta = {"poll_interval_s": args.interval, "devices": [t.ib_dev for t in targets]}
    snapshots = 0
    with TraceWriter(args.out, "collect", time.time_ns(), meta) as writer:
        try:
            for snap in poll(args.sysfs_root, targets, args.interval, args.count, args.host, ethtool, _warn):
                writer.write_message(topics.COUNTERS, snap.device, snap.ts_ns, snap)
                snapshots += 1
        except KeyboardInterrupt:
            pass
    print(f"wrote {args.out}: {snapshots} snapshots of {', '.join(t.ib_dev for t in targets)}")
    return 0


def _warn(text: str) -> None:
    print(f"fabricwatch collect: {text}", file=sys.stderr)
