"""``fabricwatch worker``: one streaming worker process (both stages; Faust spreads partitions)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from detectors.config import DetectorConfig, load_config
from detectors.outliers import OutlierStage
from streams.kafka_io import BrokerSettings, ensure_topics


def add_parser(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("worker", help="run a streaming worker (stage 1 and stage 2) against Kafka")
    w.add_argument("--broker", default=None, help="Kafka bootstrap HOST:PORT (or FABRICWATCH_BROKER)")
    w.add_argument("--broker-config", type=Path, default=None, help="YAML with a broker: section")
    w.add_argument("--config", type=Path, default=None, help="YAML with a detectors: section")
    w.add_argument("--model", type=Path, default=None, help="learned outlier model (fabricwatch train)")
    w.add_argument("--web-bind", default="127.0.0.1", help="address of /ready, /healthz, /metrics")
    w.add_argument("--web-port", type=int, default=6066)
    w.add_argument("--data-dir", type=Path, default=None, help="Faust's data directory (default: a temp dir)")
    w.add_argument(
        "--session-timeout", type=float, default=10.0, help="seconds before a dead worker's partitions move"
    )
    w.add_argument("--loglevel", default="warn", choices=["debug", "info", "warn", "error"])


def run_worker(settings: BrokerSettings, args: argparse.Namespace) -> int:
    """Run until SIGTERM or Ctrl-C; Faust then commits what was processed and leaves the group."""
    import faust

    from streams.faust_app import WorkerOptions, make_app

    config = load_config(args.config)
    ensure_topics(settings)
    with tempfile.TemporaryDirectory(prefix="fabricwatch-worker-") as tmp:
        opts = WorkerOptions(
            broker=settings,
            config=config,
            outliers=_outliers(args.model, config),
            web_bind=args.web_bind,
            web_port=args.web_port,
            datadir=args.data_dir or Path(tmp),
            session_timeout_s=args.session_timeout,
        )
        worker = faust.Worker(make_app(opts), loglevel=args.loglevel, quiet=True)
        worker.execute_from_commandline()
    return 0


def _outliers(model: Path | None, config: DetectorConfig) -> OutlierStage | None:
    if model is None:
        return None
    from detectors.outliers import OutlierDetector, OutlierModel

    return OutlierDetector(OutlierModel.load(model), config.outliers)
