"""``fabricwatch worker``: one streaming worker process (both stages; Faust spreads partitions)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import tempfile
from pathlib import Path

from fabricwatch.cli import options
from fabricwatch.streams.kafka_io import BrokerSettings, ensure_topics

HELP = "run a streaming worker (stage 1 and stage 2) against Kafka"
DESCRIPTION = """One streaming worker (Faust): stage 1 on fabric.counters, stage 2 on fabric.symptoms,
anomalies to fabric.anomalies, bad input to fabric.deadletter with its reason; /ready, /healthz and
/metrics on --web-port (docs/streaming.md). Runs until SIGTERM or Ctrl-C."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("worker", help=HELP, description=DESCRIPTION)
    options.add_broker(w)
    options.add_config(w)
    options.add_model(w)
    options.add_web(w, "worker", bind="127.0.0.1", only_publishing=False)
    w.add_argument(
        "--state-dir", type=Path, default=None, help="Faust's state directory (default: a temporary one)"
    )
    options.add_group_id(w, "fabricwatch")
    options.add_session_timeout(w)
    options.add_logging(w)
    w.add_argument(  # the name before --log-level, kept for scripts that pass it
        "--loglevel", dest="log_level", choices=["debug", "info", "warn", "error"], help=argparse.SUPPRESS
    )


def run(args: argparse.Namespace) -> int:
    return run_worker(options.broker_settings(args), args)


def _stop_before_start(signum: int, frame: object) -> None:
    """SIGTERM before Faust's own handler is in place (a rolling update that stops a worker as it
    starts): a clean exit 0 that removes its state directory, not a death by the signal."""
    raise SystemExit(0)


def run_worker(settings: BrokerSettings, args: argparse.Namespace) -> int:
    """Run until SIGTERM or Ctrl-C; Faust then commits what was processed and leaves the group."""
    import faust

    from fabricwatch.streams.faust_app import make_app
    from fabricwatch.streams.worker_context import WorkerOptions

    config = options.detector_config(args)
    signal.signal(signal.SIGTERM, _stop_before_start)
    options.start_logging(args, "worker")
    ensure_topics(settings)
    with contextlib.ExitStack() as stack:
        # A temporary state directory only when none is given (one given is its owner's to remove).
        state = args.state_dir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="fabricwatch-worker-"))
        )
        opts = WorkerOptions(
            broker=settings,
            config=config,
            outliers=options.outlier_detector(args.model, config),
            web_bind=args.web_bind,
            web_port=args.web_port,
            datadir=state,
            session_timeout_s=args.session_timeout,
            app_id=args.group_id,
        )
        # Our logging setup, not Faust's (its colours and tables): one format for every daemon.
        worker = faust.Worker(
            make_app(opts), loglevel=args.log_level.upper(), quiet=True, override_logging=False
        )
        worker.execute_from_commandline()
    return 0
