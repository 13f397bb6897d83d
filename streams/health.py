"""What a worker's health and readiness endpoints answer, decided without the web server or Kafka.

Kubernetes restarts a pod whose liveness fails and sends no traffic to one that is not ready; for a
stream worker "traffic" is partitions. So ready means: it has joined its group and holds partitions
(or the group has more workers than partitions, which is idle, not broken), and it has read the
topology. Healthy means: input is waiting on its partitions and it is moving; a worker whose
partitions have lag but which has processed nothing for ``stall_after_s`` is stuck and should go.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    stall_after_s: float = 30.0
    started: float = field(default_factory=time.monotonic)
    last_progress: float = field(default_factory=time.monotonic)
    joined: bool = False
    inputs_ready: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)

    def processed(self, what: str, n: int = 1, now: float | None = None) -> None:
        self.counts[what] += n
        self.last_progress = time.monotonic() if now is None else now

    def dead_letter(self, reason: str) -> None:
        self.dead_letters[reason_class(reason)] += 1

    def readiness(self) -> tuple[bool, str]:
        if not self.joined:
            return False, "not yet assigned partitions by the consumer group"
        if not self.inputs_ready:
            return False, "still reading topology and phases"
        return True, "ready"

    def liveness(self, lag: int, now: float | None = None) -> tuple[bool, str]:
        """``lag``: messages waiting on this worker's partitions (highwater minus position)."""
        now = time.monotonic() if now is None else now
        idle = now - max(self.last_progress, self.started)
        if lag > 0 and idle > self.stall_after_s:
            return False, f"stalled: {lag} messages waiting and nothing processed for {idle:.0f} s"
        return True, f"ok: lag {lag}, last progress {idle:.1f} s ago"

    def prometheus(self, lag: int) -> bytes:
        """The counters in Prometheus' text format, for a scrape of ``/metrics`` (prometheus-client
        writes it, as for every fabricwatch daemon)."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ProgressMetrics(self, lag))
        return generate_latest(registry)


class _ProgressMetrics:
    """A prometheus-client collector reading a worker's ``Progress`` at scrape time."""

    def __init__(self, progress: Progress, lag: int) -> None:
        self._progress = progress
        self._lag = lag

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        processed = CounterMetricFamily(
            "fabricwatch_processed", "Messages processed, by kind", labels=["what"]
        )
        for what, n in sorted(self._progress.counts.items()):
            processed.add_metric([what], n)
        dead = CounterMetricFamily(
            "fabricwatch_dead_letters", "Messages set aside, by reason", labels=["reason"]
        )
        for reason, n in sorted(self._progress.dead_letters.items()):
            dead.add_metric([reason], n)
        lag = GaugeMetricFamily("fabricwatch_consumer_lag", "Messages waiting on this worker's partitions")
        lag.add_metric([], self._lag)
        yield from (processed, dead, lag)


def reason_class(reason: str) -> str:
    """A low-cardinality label for a dead-letter reason (the full reason travels in the message)."""
    if reason.startswith("oversized"):
        return "oversized"
    if reason.startswith("empty"):
        return "empty"
    if reason.startswith("not valid JSON"):
        return "not_json"
    if reason.startswith("unsupported schema version"):
        return "schema_version"
    if reason.startswith("clock of"):
        return "clock_ahead"
    return "invalid"
