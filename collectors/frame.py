"""The frame every collector daemon runs in: where its messages go (a trace, a broker, or both),
its ``/metrics`` and ``/healthz``, how it is stopped and how it speaks.

A collector is a function ``run(settings, frame)`` that reads its source and hands each message
to ``frame.put``; everything else is the frame's, the same for every source. That is what keeps a
collector testable as a function (a test builds a ``Frame`` with a trace and an ``Event`` of its
own) and what the command line wraps (``app/cli/collect*.py`` parse options into the settings and
a ``Frame`` and call the collector).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from fabricwatch.schemas.messages import Message, encode
from fabricwatch.streams.metrics_server import WEB_PORTS

if TYPE_CHECKING:
    from fabricwatch.streams.kafka_io import BrokerSettings, Publisher


@dataclass(frozen=True)
class Destination:
    """Where a collector's messages go: a trace file, a broker, or both (never neither)."""

    out: Path | None = None
    broker: BrokerSettings | None = None

    def __post_init__(self) -> None:
        if self.out is None and self.broker is None:
            raise ValueError(
                "nowhere to put what is collected: give --broker HOST:PORT, --out TRACE, or both"
            )


@dataclass(frozen=True)
class Web:
    """``/metrics`` and ``/healthz``: ``port`` None is the daemon's port in ``WEB_PORTS`` when it
    publishes to a broker (a daemon) and none when it only writes a trace (a one-off); 0 is none."""

    bind: str = "127.0.0.1"
    port: int | None = None


@dataclass
class Frame:
    """One collector daemon's surroundings, open between ``with`` and its end (the trace flushed, the
    publisher's last messages sent and a line saying what the broker took, the web server stopped)."""

    daemon: str
    """Its name in ``WEB_PORTS``, in what it says and in the trace's header: ``collect sonic``."""
    destination: Destination
    topics: Collection[str]
    """The topics it publishes to, created if missing before the first message."""
    stop: threading.Event = field(default_factory=threading.Event)
    web: Web = field(default_factory=Web)
    meta: dict[str, Any] = field(default_factory=dict)
    """The trace header's ``meta`` (poll interval, devices)."""
    what: str = "snapshots"
    publisher: Publisher | None = field(default=None, init=False)
    port: int = field(default=0, init=False)
    """The port ``/metrics`` and ``/healthz`` are served on (0: none)."""
    handed: int = field(default=0, init=False)
    """Messages handed to ``put`` so far."""
    _stack: ExitStack = field(default_factory=ExitStack, init=False)
    _writer: Any = field(default=None, init=False)

    def __enter__(self) -> Frame:
        from fabricwatch.schemas.trace import TraceWriter

        with ExitStack() as opening:
            opening.enter_context(self._stack)
            if self.destination.out is not None:
                self._writer = self._stack.enter_context(
                    TraceWriter(self.destination.out, self.daemon, time.time_ns(), self.meta)
                )
            if self.destination.broker is not None:
                self._open_publisher(self.destination.broker)
            opening.pop_all()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.__exit__(kind, exc, tb)

    def put(self, topic: str, key: str, message: Message, ts_ns: int) -> None:
        """Hand one message to every destination."""
        self.handed += 1
        if self._writer is not None:
            self._writer.write_message(topic, key, ts_ns, message)
        if self.publisher is not None:
            self.publisher.send(topic, key, encode(message), ts_ns)

    def publish(self, topic: str, key: str, message: Message, ts_ns: int) -> None:
        """Hand one message to the broker only: what a trace has no use for (a topology report)."""
        if self.publisher is not None:
            self.publisher.send(topic, key, encode(message), ts_ns)

    def serve(self, registry: Any, health: Callable[[], tuple[bool, str]]) -> None:
        """``/metrics`` of ``registry`` and ``/healthz`` of ``health()``, until the frame closes."""
        from fabricwatch.streams.metrics_server import MetricsServer

        port = self.web.port
        if port is None:
            port = WEB_PORTS[self.daemon] if self.publisher is not None else 0
        if port:
            server = self._stack.enter_context(MetricsServer(registry, health, self.web.bind, port))
            self.port = server.port
            self.say(f"/metrics and /healthz on http://{self.web.bind}:{server.port}")

    def published(self) -> dict[str, int]:
        """What the broker did with the messages handed to it, by outcome (none without a broker)."""
        if self.publisher is None:
            return {}
        s = self.publisher.stats
        return {
            "acked": s.acked,
            "failed": s.failed,
            "dropped": s.dropped,
            "pending": s.sent - s.acked - s.failed,
        }

    def close_later(self, close: Callable[[], object]) -> None:
        """Call ``close`` when the frame closes, before the publisher's last messages are sent."""
        self._stack.callback(close)

    def warn(self, text: str) -> None:
        """Something went wrong with the collector's work: a warning of the daemon's logger
        (``fabricwatch.collect.sonic``), which the command line's logging setup formats."""
        self._log().warning("%s", text)

    def say(self, text: str) -> None:
        """What the collector is doing (where it serves, what it sent): the daemon's info."""
        self._log().info("%s", text)

    def _log(self) -> logging.Logger:
        return logging.getLogger(f"fabricwatch.{self.daemon.replace(' ', '.')}")

    def _open_publisher(self, settings: BrokerSettings) -> None:
        from fabricwatch.streams.kafka_io import Publisher, ensure_topics

        ensure_topics(settings, list(self.topics))
        publisher = Publisher(settings)
        self.publisher = publisher
        self._stack.callback(self._close_publisher, publisher)

    def _close_publisher(self, publisher: Publisher) -> None:
        publisher.close()
        s = publisher.stats
        self.say(f"published {s.acked} of {s.sent} {self.what} ({s.failed} failed, {s.dropped} dropped)")
