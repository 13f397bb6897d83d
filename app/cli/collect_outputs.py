"""What the collectors (``collect``, ``collect sonic``, ``collect gnmi``) share: their options over
their config section, where their snapshots go (a trace file, a broker, or both), and their
``/metrics`` and ``/healthz``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, TypeVar

import msgspec

from fabricwatch.cli import options
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Snapshot, encode

if TYPE_CHECKING:
    from fabricwatch.collector_metrics import CollectMetrics
    from fabricwatch.streams.kafka_io import Publisher

Settings = TypeVar("Settings", bound=msgspec.Struct)


def with_options(base: Settings, flags: dict[str, object]) -> Settings:
    """``base`` (a config section) with every option that was given over its key; an option out of
    range is named as the option."""
    from fabricwatch.schemas.config import ConfigError

    try:
        return msgspec.structs.replace(base, **{k: v for k, v in flags.items() if v is not None})
    except ValueError as exc:
        raise ConfigError(str(exc).replace("interval_s", "--interval")) from None


def check_destination(args: argparse.Namespace) -> None:
    if args.out is None and not publishing(args):
        raise ValueError("nowhere to put the snapshots: give --broker HOST:PORT, --out TRACE, or both")


def serve_metrics(
    stack: ExitStack,
    metrics: CollectMetrics,
    bind: str,
    port: int | None,
    daemon: str,
    publisher: Publisher | None,
    warn: Callable[[str], None],
) -> None:
    """``/metrics`` and ``/healthz`` on ``port``; by default on the daemon's port of
    ``options.WEB_PORTS`` when publishing to a broker (a daemon), nowhere when only writing a trace."""
    from fabricwatch.streams.metrics_server import MetricsServer

    port = port if port is not None else (options.WEB_PORTS[daemon] if publisher else 0)
    if port:
        server = stack.enter_context(MetricsServer(metrics.registry, metrics.health, bind, port))
        warn(f"/metrics and /healthz on http://{bind}:{server.port}")


def publishing(args: argparse.Namespace) -> bool:
    """Whether a broker is named: --broker, FABRICWATCH_BROKER or the config's broker: section."""
    from fabricwatch.streams.kafka_io import load_broker_settings

    return bool(args.broker) or bool(load_broker_settings(args.broker_config or args.config).bootstrap)


def outputs_of(
    args: argparse.Namespace, interval_s: float, stack: ExitStack, devices: list[str]
) -> tuple[list[Callable[[Snapshot], None]], Publisher | None]:
    """Where each snapshot goes: the trace file and/or the broker, closed (flushed) at the end."""
    from fabricwatch.schemas.trace import TraceWriter
    from fabricwatch.streams.kafka_io import Publisher, ensure_topics

    outputs: list[Callable[[Snapshot], None]] = []
    publisher = None
    if args.out is not None:
        meta = {"poll_interval_s": interval_s, "devices": devices}
        writer = stack.enter_context(TraceWriter(args.out, "collect", time.time_ns(), meta))
        outputs.append(lambda snap: writer.write_message(topics.COUNTERS, snap.device, snap.ts_ns, snap))
    if publishing(args):
        settings = options.broker_settings(args)
        ensure_topics(settings, [topics.COUNTERS, topics.TOPOLOGY])
        publisher = Publisher(settings)
        stack.callback(_close_publisher, publisher)
        outputs.append(lambda snap: publisher.send(topics.COUNTERS, snap.device, encode(snap), snap.ts_ns))
    return outputs, publisher


def outcomes(publisher: Publisher) -> Callable[[], dict[str, int]]:
    def counts() -> dict[str, int]:
        s = publisher.stats
        return {
            "acked": s.acked,
            "failed": s.failed,
            "dropped": s.dropped,
            "pending": s.sent - s.acked - s.failed,
        }

    return counts


def _close_publisher(publisher: Publisher) -> None:
    publisher.close()
    s = publisher.stats
    print(
        f"published {s.acked} of {s.sent} snapshots ({s.failed} failed, {s.dropped} dropped)", file=sys.stderr
    )
