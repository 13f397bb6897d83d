"""``fabricwatch sink``: rates, anomalies, phases and topology from Kafka into ClickHouse."""

from __future__ import annotations

import argparse
import contextlib
import logging

from fabricwatch.cli import options
from fabricwatch.storage.store import DEFAULT_DATA_DIR

log = logging.getLogger("fabricwatch.sink")

HELP = "store fabric.rates/anomalies/phases/topology from Kafka into ClickHouse"
DESCRIPTION = """Consume fabric.rates, fabric.anomalies, fabric.phases and fabric.topology and insert
them in batches into ClickHouse (chdb or a server), committing offsets only after each insert. Runs
until SIGINT/SIGTERM (or --idle-exit), then stores and commits what it holds."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sink", help=HELP, description=DESCRIPTION)
    options.add_broker(p)
    options.add_config(p, section="broker")
    options.add_store(p, DEFAULT_DATA_DIR, from_env=True)
    options.add_group_id(p, "fabricwatch-sink")
    options.add_session_timeout(p)
    p.add_argument(
        "--rebalance-timeout",
        type=float,
        default=60.0,
        help="seconds a rebalance may wait for the sink to store what it holds (Kafka's max poll "
        "interval; default: 60)",
    )
    p.add_argument(
        "--max-rows",
        type=int,
        default=200_000,
        help="insert when this many rows are buffered (default: 200000)",
    )
    p.add_argument(
        "--max-delay", type=float, default=5.0, help="... or when the oldest waited this long, s (default: 5)"
    )
    p.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        help="stop after this many seconds without a record (default: run until stopped)",
    )
    options.add_web(p, "sink", bind="127.0.0.1", only_publishing=False)
    options.add_logging(p)


def _waiting_health(bind: str, port: int) -> contextlib.AbstractContextManager[object]:
    """``/healthz`` while the sink waits for its store at start: alive (a restart would not bring
    ClickHouse back), saying what it waits for; the full ``/metrics`` come once it runs."""
    if not port:
        return contextlib.nullcontext()
    from prometheus_client import CollectorRegistry

    from fabricwatch.streams.metrics_server import MetricsServer

    return MetricsServer(CollectorRegistry(), lambda: (True, "waiting for the store to open"), bind, port)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.storage.consumer import open_store, run_sink

    settings = options.broker_settings(args)
    options.start_logging(args, "sink")
    stopping = options.Stopping()
    stop = stopping.event
    with _waiting_health(args.web_bind, args.web_port):
        opened = open_store(options.store_target(args), stop)
    if opened is None:
        return stopping.exit_code
    with opened as store:
        log.info("storing into %s from %s (group %s)", store.where, settings.bootstrap, args.group_id)
        timeout_ms = int(args.rebalance_timeout * 1000)
        session_ms = min(timeout_ms, int(args.session_timeout * 1000))
        consumer_options = {
            "max_poll_interval_ms": timeout_ms,
            "session_timeout_ms": session_ms,
            "heartbeat_interval_ms": min(3000, session_ms // 3),
        }
        run_sink(
            settings,
            store,
            args.group_id,
            args.max_rows,
            args.max_delay,
            stop,
            args.idle_exit,
            consumer_options=consumer_options,
            report=print,
            web=(args.web_bind, args.web_port),
        )
    return stopping.exit_code
