"""``fabricwatch record``: broker topics into a trace file."""

from __future__ import annotations

import argparse

from fabricwatch.cli import options

HELP = "record broker topics into a trace file"
DESCRIPTION = """Consume topics from Kafka into a trace file (in consumption order, each partition's
order kept) until no message came for --idle seconds."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help=HELP, description=DESCRIPTION)
    options.add_broker(p)
    options.add_out(p, required=True)
    p.add_argument(
        "--topic", action="append", default=None, help="topic to record (repeatable; default: all)"
    )
    p.add_argument(
        "--idle",
        type=float,
        default=10.0,
        help="stop after this many seconds without a message (default: 10)",
    )
    p.add_argument(
        "--max-records", type=int, default=None, help="stop after this many records (default: no limit)"
    )


def run(args: argparse.Namespace) -> int:
    from fabricwatch.streams.kafka_io import DEFAULT_PARTITIONS
    from fabricwatch.streams.traces import record_topics

    names = args.topic or list(DEFAULT_PARTITIONS)
    count = record_topics(options.broker_settings(args), args.out, names, args.idle, args.max_records)
    print(f"wrote {args.out}: {count} records from {', '.join(names)}")
    return 0
