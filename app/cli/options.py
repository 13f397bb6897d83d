"""Options shared by several subcommands, each defined once, with one meaning per name.

- ``--config FILE``: the config file (``detectors:``, ``broker:``, ``alerts:`` sections; see
  ``fabricwatch.schemas.config``).
- ``--broker HOST:PORT`` and ``--broker-config FILE``: where Kafka is (the file's ``broker:``
  section; default ``--config``'s file), overridden by ``FABRICWATCH_*`` variables.
- ``--data-dir DIR`` / ``--clickhouse URL``: the ClickHouse store (chdb directory, or a server).
- ``--model FILE`` / ``--train-minutes M``: the learned outlier detector.
"""

from __future__ import annotations

import argparse
import signal
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fabricwatch.detectors.config import DetectorConfig, load_config

if TYPE_CHECKING:
    from fabricwatch.detectors.outliers import OutlierDetector
    from fabricwatch.streams.kafka_io import BrokerSettings


def default_scenario() -> Path:
    return Path(str(resources.files("fabricwatch.scenarios").joinpath("demo.yaml")))


def add_config(p: argparse.ArgumentParser, required: bool = False, section: str = "detectors") -> None:
    p.add_argument(
        "--config",
        type=Path,
        required=required,
        default=None,
        help=f"config file (YAML) whose {section}: section to use (default: built-in defaults)",
    )


def add_broker(p: argparse.ArgumentParser, what: str = "Kafka bootstrap HOST:PORT") -> None:
    p.add_argument("--broker", default=None, help=f"{what} (or FABRICWATCH_BROKER)")
    p.add_argument(
        "--broker-config",
        type=Path,
        default=None,
        help="config file whose broker: section (SASL/TLS) to use (default: --config's file)",
    )


def broker_settings(args: argparse.Namespace) -> BrokerSettings:
    """Broker settings from the options, the config file and the environment; an error when no
    broker is named anywhere."""
    from fabricwatch.streams.kafka_io import load_broker_settings

    settings = load_broker_settings(args.broker_config or getattr(args, "config", None))
    if args.broker:
        settings = settings.with_bootstrap(args.broker)
    if not settings.bootstrap:
        raise ValueError("no broker: give --broker HOST:PORT or set FABRICWATCH_BROKER")
    return settings


def add_store(p: argparse.ArgumentParser, default_dir: Path | None, can_skip: bool = False) -> None:
    where = f"default: {default_dir}" if default_dir else "default: do not store"
    p.add_argument(
        "--data-dir", type=Path, default=default_dir, help=f"embedded ClickHouse (chdb) store ({where})"
    )
    p.add_argument(
        "--clickhouse",
        default=None,
        metavar="URL",
        help="a ClickHouse server instead: clickhouse://USER:PASSWORD@HOST:9000/DB",
    )
    if can_skip:
        p.add_argument("--no-store", action="store_true", help="do not store rates and anomalies")


def store_target(args: argparse.Namespace) -> str | Path | None:
    """The store the options name, or None when nothing is to be stored."""
    if getattr(args, "no_store", False):
        return None
    return args.clickhouse or args.data_dir


def add_detection(p: argparse.ArgumentParser) -> None:
    """The options of commands that run detection in process (replay, demo)."""
    add_config(p)
    p.add_argument("--json", action="store_true", help="print anomaly events as JSON lines instead")
    p.add_argument("--quiet", action="store_true", help="print only the summary tables")
    add_model(p)
    p.add_argument(
        "--train-minutes",
        type=float,
        default=None,
        help="learn outliers from the trace's first M minutes (instead of --model)",
    )


def add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", type=Path, default=None, help="learned outlier model file (from fabricwatch train)"
    )


def outlier_detector(model: Path | None, config: DetectorConfig) -> OutlierDetector | None:
    """The learned outlier detector of a model file, or None (scikit-learn is not even imported)."""
    if model is None:
        return None
    from fabricwatch.detectors.outliers import load_detector

    return load_detector(model, config.outliers)


def detector_config(args: argparse.Namespace) -> DetectorConfig:
    return load_config(args.config)


class Stopping:
    """SIGINT and SIGTERM set ``event`` instead of raising, so a daemon sends what it read and
    stops at its next check; ``exit_code`` is then 130 after Ctrl-C and 0 after SIGTERM."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._by: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._by.append(signum)
        self.event.set()

    @property
    def exit_code(self) -> int:
        return 130 if self._by[:1] == [signal.SIGINT] else 0
