"""The ``fabricwatch`` command: one module per subcommand, each with ``add_parser`` and ``run``.

A new subcommand is a new module here and one line in ``COMMANDS``. Options shared by several
subcommands are defined once, in ``options``. Modules import what is heavy (Kafka, Faust,
ClickHouse, scikit-learn) inside ``run``, so ``--help`` and the light commands start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from fabricwatch import __version__
from fabricwatch.blas_threads import limit_blas_threads
from fabricwatch.cli import (
    alert,
    broker,
    collect,
    demo,
    evaluate,
    grafana,
    ingest,
    phases,
    record,
    replay,
    report,
    run,
    schema,
    silence,
    simulate,
    sink,
    train,
    worker,
)
from fabricwatch.local.processes import ChildError
from fabricwatch.schemas.config import ConfigError
from fabricwatch.schemas.trace import TraceFormatError

COMMANDS: dict[str, ModuleType] = {
    "simulate": simulate,
    "replay": replay,
    "demo": demo,
    "run": run,
    "broker": broker,
    "worker": worker,
    "sink": sink,
    "alert": alert,
    "silence": silence,
    "report": report,
    "grafana": grafana,
    "record": record,
    "collect": collect,
    "ingest": ingest,
    "phases": phases,
    "schema": schema,
    "train": train,
    "evaluate": evaluate,
}

DESCRIPTION = """Streaming telemetry and anomaly detection for RoCE / InfiniBand AI training fabrics:
NIC and switch counters in, incasts, PFC storms and ECMP collapse out, named by job, collective and
root port. Start with `fabricwatch run` (everything on this machine) or `fabricwatch demo` (one
process)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fabricwatch", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"fabricwatch {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; a usage, config, input or broker error is one line on stderr and exit 2,
    a child process that could not serve (a worker that died, a broker that did not start) one line
    with its reason and exit 1, Ctrl-C one line and exit 130 (never a traceback)."""
    args = parser().parse_args(argv)
    limit_blas_threads()
    try:
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt:  # what the command opened was closed on the way out
        print(f"\nfabricwatch {args.command}: stopped by Ctrl-C", file=sys.stderr)
        return 130
    except (ConfigError, TraceFormatError, ValueError, OSError) as exc:
        print(f"fabricwatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except ChildError as exc:  # what else it started was stopped on the way out
        print(f"fabricwatch {args.command}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if _is_broker_error(exc):
            print(f"fabricwatch {args.command}: {_broker_error(args, exc)}", file=sys.stderr)
            return 2
        if _is_store_error(exc):
            print(f"fabricwatch {args.command}: {exc}", file=sys.stderr)
            return 1
        raise


def _broker_error(args: argparse.Namespace, exc: Exception) -> str:
    """What went wrong with the broker, in words: kafka-python's messages repeat their class name
    (``KafkaTimeoutError: Unable to bootstrap ...``), which says nothing to a user."""
    config = getattr(args, "broker_config", None) or getattr(args, "config", None)
    where = (
        getattr(args, "broker", None)
        or os.environ.get("FABRICWATCH_BROKER")
        or (f"(broker.bootstrap of {config})" if config else "(none named)")
    )
    name = type(exc).__name__
    text = str(exc).removeprefix(f"{name}: ").strip() or name
    hint = ""
    if "bootstrap" in text.lower() or "ECONNREFUSED" in text or "refused" in text.lower():
        hint = " (is it running and reachable? `fabricwatch broker` starts one on this machine)"
    return f"broker {where}: {text}{hint}"


def _is_store_error(exc: Exception) -> bool:
    """A store that cannot be opened or written (held by another process, a server away): its
    message says which and what to do. Checked only when the storage was loaded at all."""
    backends = sys.modules.get("fabricwatch.storage.backends")
    return backends is not None and isinstance(exc, backends.StoreError)


def _is_broker_error(exc: Exception) -> bool:
    """A Kafka client error (no broker, timeouts, auth). Checked against the client's own error
    class, and only when the client was loaded at all (it costs a quarter second to import)."""
    errors = sys.modules.get("kafka.errors")
    return errors is not None and isinstance(exc, errors.KafkaError)
