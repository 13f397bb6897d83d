"""Options shared by several subcommands, each defined once here, with one meaning per name (pip's
``cmdoptions`` is the model). A definer may word its help for the command (which section of the
config file it reads, what its output is), never change what the option does.

- ``--config FILE``: the config file (``detectors:``, ``broker:``, ``alerts:`` sections; see
  ``fabricwatch.schemas.config``).
- ``--broker HOST:PORT`` and ``--broker-config FILE``: where Kafka is (the file's ``broker:``
  section; default ``--config``'s file), overridden by ``FABRICWATCH_*`` variables.
- ``--data-dir DIR`` / ``--clickhouse URL``: the ClickHouse store (chdb directory, or a server).
- ``--model FILE`` / ``--train-minutes M``: the learned outlier detector.
- ``--out``: where the command writes what it makes (a trace, a report, a model).
- ``--json``: print the command's output as JSON instead of text.
- ``--speed X``: the pace against recorded (or real) time: 1 is real time, N is N times faster,
  0 as fast as possible.
- ``--seed N``, ``--interval S``, ``--count N``, ``--host NAME``, ``--lldp-interval S``,
  ``--group-id G``, ``--web-bind ADDR`` / ``--web-port N`` (one port table, ``WEB_PORTS``).

Every action made here carries the name of its definer (``definition``): ``tests/app/test_options.py``
walks every parser and fails on an option name defined outside this module in two commands, or by
two definers.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from fabricwatch.detectors.config import DetectorConfig, load_config

if TYPE_CHECKING:
    from fabricwatch.collectors.frame import Destination
    from fabricwatch.detectors.outliers import OutlierDetector
    from fabricwatch.streams.kafka_io import BrokerSettings


T = TypeVar("T")
Settings = TypeVar("Settings", bound=msgspec.Struct)


def _defined(definer: str, *actions: argparse.Action) -> None:
    for action in actions:
        action.definition = definer  # type: ignore[attr-defined]


def default_scenario() -> Path:
    return Path(str(resources.files("fabricwatch.scenarios").joinpath("demo.yaml")))


def add_config(p: argparse.ArgumentParser, required: bool = False, section: str = "detectors") -> None:
    default = "" if required else " (default: built-in defaults)"
    _defined(
        "config",
        p.add_argument(
            "--config",
            type=Path,
            required=required,
            default=None,
            help=f"config file (YAML) whose {section}: section to use{default}",
        ),
    )


def add_broker(p: argparse.ArgumentParser, what: str = "Kafka bootstrap HOST:PORT") -> None:
    _defined(
        "broker",
        p.add_argument("--broker", default=None, help=f"{what} (or FABRICWATCH_BROKER)"),
        p.add_argument(
            "--broker-config",
            type=Path,
            default=None,
            help="config file whose broker: section (SASL/TLS) to use (default: --config's file, for a "
            "command that takes one)",
        ),
    )


def destination(args: argparse.Namespace) -> Destination:
    """Where a collector's messages go: ``--out`` and/or the broker named by ``--broker``,
    FABRICWATCH_BROKER or the config's ``broker:`` section."""
    from fabricwatch.collectors.frame import Destination
    from fabricwatch.streams.kafka_io import load_broker_settings

    settings = load_broker_settings(args.broker_config or getattr(args, "config", None))
    if args.broker:
        settings = settings.with_bootstrap(args.broker)
    return Destination(args.out, settings if settings.bootstrap else None)


def with_options(base: Settings, flags: dict[str, object]) -> Settings:
    """``base`` (a config section) with every option that was given over its key; an option out of
    range is named as the option."""
    from fabricwatch.schemas.config import ConfigError

    try:
        return msgspec.structs.replace(base, **{k: v for k, v in flags.items() if v is not None})
    except ValueError as exc:
        raise ConfigError(str(exc).replace("interval_s", "--interval")) from None


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


def add_store(
    p: argparse.ArgumentParser, default_dir: Path | None, can_skip: bool = False, from_env: bool = False
) -> None:
    """``from_env`` (a daemon's): without either option, ``FABRICWATCH_CLICKHOUSE_URL``'s server,
    else ``default_dir``; an option given always beats the environment."""
    where = f"default: {default_dir}" if default_dir else "default: do not store"
    if from_env:
        where = f"default: FABRICWATCH_CLICKHOUSE_URL's server if set, else {default_dir}"
        p.set_defaults(store_from_env=default_dir)
    _defined(
        "store",
        p.add_argument(
            "--data-dir",
            type=_given(Path),
            default=None if from_env else default_dir,
            help=f"embedded ClickHouse (chdb) store ({where})",
        ),
        p.add_argument(
            "--clickhouse",
            type=_given(str),
            default=None,
            metavar="URL",
            help="a ClickHouse server instead: clickhouse://USER@HOST:9000/DB (its password from "
            "FABRICWATCH_CLICKHOUSE_PASSWORD: a command line is visible to every user)",
        ),
    )
    if can_skip:
        _defined(
            "store",
            p.add_argument("--no-store", action="store_true", help="do not store rates and anomalies"),
        )


def _given(kind: Callable[[str], T]) -> Callable[[str], T]:
    """An option's value that must not be empty: ``--clickhouse ""`` (an unset variable in a unit
    file) silently meant the default store in the current directory."""

    def parse(text: str) -> T:
        if not text.strip():
            raise argparse.ArgumentTypeError("empty (an unset environment variable in the command line?)")
        return kind(text)

    return parse


def store_target(args: argparse.Namespace) -> str | Path | None:
    """The store the options name, or None when nothing is to be stored."""
    if getattr(args, "no_store", False):
        return None
    if args.clickhouse or args.data_dir is not None or not hasattr(args, "store_from_env"):
        return args.clickhouse or args.data_dir
    return os.environ.get("FABRICWATCH_CLICKHOUSE_URL") or args.store_from_env


def add_detection(p: argparse.ArgumentParser) -> None:
    """The options of commands that run detection in process (replay, demo)."""
    add_config(p)
    add_json(p, "anomaly events, one a line")
    _defined(
        "detection", p.add_argument("--quiet", action="store_true", help="print only the summary tables")
    )
    add_model(p)
    _defined(
        "model",
        p.add_argument(
            "--train-minutes",
            type=float,
            default=None,
            help="learn outliers from the trace's first M minutes (instead of --model)",
        ),
    )


def add_model(p: argparse.ArgumentParser) -> None:
    _defined(
        "model",
        p.add_argument(
            "--model", type=Path, default=None, help="learned outlier model file (from fabricwatch train)"
        ),
    )


def add_out(
    p: argparse.ArgumentParser, what: str = "trace file", required: bool = False, also: bool = False
) -> None:
    """Where the command writes what it makes; a trace file is gzipped when its name ends in .gz."""
    gz = " (.gz to compress)" if what == "trace file" else ""
    _defined(
        "out",
        p.add_argument(
            "--out",
            type=Path,
            required=required,
            default=None,
            help=f"{what} to write{' as well' if also else ''}{gz}",
        ),
    )


def add_json(p: argparse.ArgumentParser, what: str) -> None:
    _defined(
        "json", p.add_argument("--json", action="store_true", help=f"print {what} as JSON instead of text")
    )


def add_speed(p: argparse.ArgumentParser, default: float, applies: str = "") -> None:
    _defined(
        "speed",
        p.add_argument(
            "--speed",
            type=float,
            default=default,
            help=f"{applies}pace: 1 = real time, N = N times faster, 0 = as fast as possible "
            f"(default: {default:g})",
        ),
    )


def add_scenario(p: argparse.ArgumentParser) -> None:
    """The scenario a command simulates, and its seed."""
    _defined(
        "scenario",
        p.add_argument("--scenario", type=Path, default=None, help="scenario YAML (default: the demo)"),
    )
    add_seed(p)


def add_name(p: argparse.ArgumentParser) -> None:
    """One switch named on the command line (instead of the config's list)."""
    _defined(
        "name",
        p.add_argument("--name", default=None, help="that switch's name in the fabric (its device id)"),
    )


def add_phase_reading(p: argparse.ArgumentParser) -> None:
    """How NCCL/RCCL log lines become phases, whether followed live or imported."""
    _defined(
        "phase-reading",
        p.add_argument(
            "--job",
            default=None,
            help="the job's name, as incidents will name it (default: the name of the directory each "
            "log file is in, as with NCCL_DEBUG_FILE=/var/log/nccl/<job>/%%h.%%p.log)",
        ),
        p.add_argument(
            "--gap", type=float, default=0.5, help="seconds without a call that end a phase (default: 0.5)"
        ),
    )


def add_seed(p: argparse.ArgumentParser, whose: str = "the scenario's") -> None:
    _defined(
        "seed",
        p.add_argument("--seed", type=int, default=None, help=f"seed of the simulation (default: {whose})"),
    )


def add_interval(
    p: argparse.ArgumentParser, what: str, default: float | None = None, shown: str = "1"
) -> None:
    _defined(
        "interval",
        p.add_argument(
            "--interval", type=float, default=default, help=f"seconds between {what} (default: {shown})"
        ),
    )


def add_count(p: argparse.ArgumentParser, what: str) -> None:
    _defined(
        "count",
        p.add_argument(
            "--count", type=int, default=None, help=f"stop after this many {what} (default: until stopped)"
        ),
    )


def add_host(p: argparse.ArgumentParser, what: str) -> None:
    _defined("host", p.add_argument("--host", default=None, help=f"host name {what}"))


def add_lldp_interval(p: argparse.ArgumentParser, what: str) -> None:
    _defined(
        "lldp-interval",
        p.add_argument(
            "--lldp-interval",
            type=float,
            default=None,
            help=f"seconds between reads of {what}, published to fabric.topology when it changed; 0 for "
            "none (default: 30 when publishing to a broker)",
        ),
    )


def add_alerts(p: argparse.ArgumentParser) -> None:
    _defined(
        "alerts",
        p.add_argument(
            "--alerts", type=Path, default=None, help="config file whose alerts: section to deliver alerts by"
        ),
    )


def add_group_id(p: argparse.ArgumentParser, default: str) -> None:
    _defined(
        "group-id",
        p.add_argument(
            "--group-id", default=default, help=f"consumer group, where the offsets live (default: {default})"
        ),
    )


def add_session_timeout(p: argparse.ArgumentParser, default: float = 10.0) -> None:
    _defined(
        "session-timeout",
        p.add_argument(
            "--session-timeout",
            type=float,
            default=default,
            help="seconds before a dead member's partitions move to another of its group "
            f"(default: {default:g})",
        ),
    )


def add_web(
    p: argparse.ArgumentParser, daemon: str, bind: str | None = None, only_publishing: bool = True
) -> None:
    """/metrics and /healthz (and a worker's /ready) on ``--web-bind``:``--web-port``; the port's
    default is the daemon's in ``WEB_PORTS`` (a collector's only when it publishes to a broker)."""
    from fabricwatch.streams.metrics_server import WEB_PORTS

    port = WEB_PORTS[daemon]
    endpoints = "/ready, /healthz and /metrics" if daemon == "worker" else "/metrics and /healthz"
    when = ", 0 for none (default: {port} when publishing to a broker, none when only writing a trace)"
    when = when.format(port=port) if only_publishing else f" (default: {port})"
    _defined(
        "web",
        p.add_argument("--web-bind", default=bind, help=f"address of {endpoints} (default: 127.0.0.1)"),
        p.add_argument(
            "--web-port",
            type=int,
            default=None if only_publishing else port,
            help=f"port of {endpoints}{when}",
        ),
    )


def add_logging(p: argparse.ArgumentParser, under: bool = False) -> None:
    """How a daemon logs: every line with its time, level and component (``app/daemon_logs.py``).
    ``under``: a sub-command of a command that has them too (``collect sonic``), whose defaults
    must not undo what was given before the sub-command's name."""
    from fabricwatch.daemon_logs import FORMATS, LEVELS

    level, fmt = (argparse.SUPPRESS, argparse.SUPPRESS) if under else ("info", "text")

    _defined(
        "logging",
        p.add_argument(
            "--log-level",
            choices=LEVELS,
            default=level,
            help="the least a line must be to be logged (default: info)",
        ),
        p.add_argument(
            "--log-format", choices=FORMATS, default=fmt, help="text lines, or JSON lines (default: text)"
        ),
    )


def start_logging(args: argparse.Namespace, daemon: str, settings: object = None) -> None:
    """Set up the daemon's logging and log its first line: version and effective settings (its
    config section merged with the options when given, else the options)."""
    from fabricwatch.daemon_logs import log_start, setup_logging

    setup_logging(args.log_level, args.log_format)
    shown = msgspec.to_builtins(settings) if settings is not None else {}
    given = {k: v for k, v in vars(args).items() if k not in ("log_level", "log_format") and not callable(v)}
    log_start(daemon, {"options": given, **({"settings": shown} if shown else {})})


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
