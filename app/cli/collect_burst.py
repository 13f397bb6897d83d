"""``fabricwatch collect burst``: a few seconds of an interface's counters every millisecond or
faster, and the profile of its bursts (``ingest/nic/burst.py``); on demand, or each time an
incident opens on this host (``--on-incident``), published for the store (``fabric.bursts``)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

import msgspec

from fabricwatch.cli import options

HELP = "sample interfaces' byte and packet counters every 100 µs-1 ms for a few seconds: their bursts"
DESCRIPTION = """Sample each interface's statistics (rx/tx bytes and packets, /sys/class/net) every
--period for --seconds, one interface after the other, and print the profile of each per
millisecond as one JSON line: the busiest millisecond's rate, the 99th percentile and the mean,
the time at 90 % of line rate or more, the bursts (runs of milliseconds at half of line rate or
more) and the rate of every millisecond. What a poll every second averages away: run it on a host
whose leaf port has microburst findings. It costs a core while it runs (docs/capacity.md).
With a broker, each profile is also published to fabric.bursts for the store and the report; with
--on-incident it waits for incidents instead and captures each time one fires naming this host
(at most once every --cooldown seconds)."""


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
    options.add_broker(p, "Kafka bootstrap HOST:PORT to publish the profiles to (fabric.bursts)")
    options.add_host(
        p, "the incidents name and the profiles carry (or FABRICWATCH_HOST; default: this host's)"
    )
    p.add_argument(
        "--on-incident",
        action="store_true",
        help="wait for incidents on fabric.anomalies and capture each time one fires naming this host",
    )
    p.add_argument(
        "--cooldown",
        type=float,
        default=300.0,
        help="seconds between two captures --on-incident (default: 300)",
    )
    p.add_argument(
        "--max-captures", type=int, default=0, help="--on-incident: stop after this many (default: 0, never)"
    )
    options.add_logging(p, under=True)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.collectors.burst import TOPICS, BurstSettings, capture_all, watch_incidents
    from fabricwatch.collectors.frame import Destination, Frame

    settings = BurstSettings(
        tuple(args.netdev),
        args.host or os.environ.get("FABRICWATCH_HOST") or socket.gethostname(),
        args.period,
        args.seconds,
        args.line_gbps * 1e9 / 8,
        args.cooldown,
        args.max_captures,
    )
    broker = options.broker_settings(args) if args.broker or args.on_incident else None
    if args.on_incident:
        options.start_logging(args, "collect burst", settings)
        stopping = options.Stopping()
        with Frame(
            "collect burst", Destination(None, broker), TOPICS, stopping.event, what="profiles"
        ) as frame:
            watch_incidents(settings, frame, broker)  # type: ignore[arg-type]
        return stopping.exit_code
    taken, failed = capture_all(settings)
    for text in failed:
        print(f"fabricwatch collect burst: {text}", file=sys.stderr)
    for prof in taken:
        print(msgspec.json.encode(prof).decode(), flush=True)
    if broker is not None:
        with Frame("collect burst", Destination(None, broker), TOPICS, what="profiles") as frame:
            for prof in taken:
                frame.put(TOPICS[0], prof.host, prof, prof.start_ns)
    return 1 if failed else 0
