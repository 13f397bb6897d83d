"""``fabricwatch collect burst``: a few seconds of an interface's counters every millisecond or
faster, and the profile of its bursts (``ingest/nic/burst.py``)."""

from __future__ import annotations

import argparse
import sys

HELP = "sample interfaces' byte and packet counters every 100 µs-1 ms for a few seconds: their bursts"
DESCRIPTION = """Sample each interface's statistics (rx/tx bytes and packets, /sys/class/net) every
--period for --seconds, one interface after the other, and print the profile of each per
millisecond as one JSON line: the busiest millisecond's rate, the 99th percentile and the mean,
the time at 90 % of line rate or more, the bursts (runs of milliseconds at half of line rate or
more) and the rate of every millisecond. What a poll every second averages away: run it on a host
whose leaf port has microburst findings. It costs a core while it runs (docs/capacity.md)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("burst", help=HELP, description=DESCRIPTION)
    p.add_argument("netdev", nargs="+", help="network interface, e.g. eth2 (an RDMA NIC's netdev)")
    p.add_argument(
        "--period", type=float, default=0.001, help="seconds between samples, 0.00005 to 1 (default: 0.001)"
    )
    p.add_argument("--seconds", type=float, default=2.0, help="how long to sample, at most 60 (default: 2)")
    p.add_argument(
        "--line-gbps", type=float, default=400.0, help="the interfaces' line rate in Gb/s (default: 400)"
    )


def run(args: argparse.Namespace) -> int:
    import msgspec

    from fabricwatch.ingest.nic.burst import CaptureError, capture, profile

    failed = 0
    for netdev in args.netdev:
        try:
            prof = profile(capture(netdev, args.period, args.seconds), args.line_gbps * 1e9 / 8, args.period)
        except CaptureError as exc:
            print(f"fabricwatch collect burst: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(msgspec.json.encode(prof).decode(), flush=True)
    return 1 if failed else 0
