"""The host collector's self-metrics and health, for ``/metrics`` and ``/healthz``.

Counts are read from the collector's ``CollectStats`` and its publisher at scrape time (nothing to
keep in step); the poll duration is a histogram observed after each poll. Healthy means a poll
finished recently: a collector stuck on a hung read or a dead sysfs stops being healthy within
three intervals, and its orchestrator restarts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fabricwatch.ingest.nic.poll import CollectStats
from fabricwatch.ingest.sonic.switch import SwitchStats

POLL_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Liveness:
    """A daemon's ``/healthz``: healthy while its periodic work (a poll, a read of the logs) keeps
    finishing, within three intervals and at least 5 s."""

    def __init__(self, what: str, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._what, self._interval_s, self._clock = what, interval_s, clock
        self._started = clock()
        self._last: float | None = None

    def done(self) -> None:
        self._last = self._clock()

    def health(self) -> tuple[bool, str]:
        since = self._clock() - (self._last or self._started)
        if since > max(3 * self._interval_s, 5.0):
            return False, f"no {self._what} finished for {since:.0f} s (interval {self._interval_s} s)"
        return True, f"ok: last {self._what} {since:.1f} s ago"


class CollectMetrics:
    """A prometheus-client registry for one collector."""

    def __init__(
        self,
        stats: CollectStats,
        interval_s: float,
        published: Callable[[], dict[str, int]] | None = None,
        switches: Mapping[str, SwitchStats] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry(auto_describe=False)
        self._poll_seconds = Histogram(
            "fabricwatch_collect_poll_duration_seconds",
            "Time one poll of every device took, reads and hand-over included",
            buckets=POLL_BUCKETS_S,
            registry=self.registry,
        )
        self.registry.register(_StatsCollector(stats, published))
        if switches is not None:
            self._read_seconds = Histogram(
                "fabricwatch_collect_switch_poll_duration_seconds",
                "Time one switch took to answer one poll, by switch",
                ["switch"],
                buckets=POLL_BUCKETS_S,
                registry=self.registry,
            )
            self.registry.register(_SwitchCollector(switches))
        self._liveness = Liveness("poll", interval_s, clock)
        self.health = self._liveness.health

    def observe_poll(self, seconds: float) -> None:
        self._poll_seconds.observe(seconds)
        self._liveness.done()

    def observe_read(self, switch: str, seconds: float) -> None:
        self._read_seconds.labels(switch).observe(seconds)


class _StatsCollector:
    def __init__(self, stats: CollectStats, published: Callable[[], dict[str, int]] | None) -> None:
        self._stats = stats
        self._published = published

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        s = self._stats
        yield CounterMetricFamily("fabricwatch_collect_polls", "Polls done", value=s.polls)
        yield CounterMetricFamily(
            "fabricwatch_collect_late_polls",
            "Polls that overran the interval and were skipped",
            value=s.late_polls,
        )
        yield CounterMetricFamily("fabricwatch_collect_snapshots", "Device snapshots read", value=s.snapshots)
        errors = CounterMetricFamily(
            "fabricwatch_collect_read_errors", "Reads that lost something, by device", labels=["device"]
        )
        for device, n in sorted(s.problems.items()):
            errors.add_metric([device], n)
        yield errors
        if self._published is not None:
            messages = CounterMetricFamily(
                "fabricwatch_collect_messages",
                "Snapshots handed to the broker, by outcome",
                labels=["outcome"],
            )
            for outcome, n in self._published().items():
                messages.add_metric([outcome], n)
            yield messages


class _SwitchCollector:
    """Per-switch counts of what a SONiC collector met, read from each switch's stats at scrape time."""

    _COUNTS = (
        ("failures", "Switch polls that gave no snapshot (unreachable, no name maps, garbage)"),
        ("map_reads", "Reads of a switch's name maps: the first, then one per reboot or breakout"),
        ("stale_groups", "Counter groups sent as unknown because the switch had not refreshed them yet"),
        ("bad_values", "Hash values that were not counters, left out"),
    )

    def __init__(self, switches: Mapping[str, SwitchStats]) -> None:
        self._switches = switches

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for name, text in self._COUNTS:
            family = CounterMetricFamily(f"fabricwatch_collect_switch_{name}", text, labels=["switch"])
            for switch, stats in sorted(self._switches.items()):
                family.add_metric([switch], getattr(stats, name))
            yield family


class TranslateMetrics:
    """A prometheus-client registry for one gNMI translator (``fabricwatch ingest``): what it read
    and sent, counted at scrape time; healthy while its reads of the topic keep returning."""

    def __init__(
        self,
        counts: Callable[[], dict[str, int]],
        published: Callable[[], dict[str, int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_TranslateCollector(counts, published))
        self._liveness = Liveness("read of the topic", 1.0, clock)
        self.health = self._liveness.health
        self.read_done = self._liveness.done


class _TranslateCollector:
    def __init__(self, counts: Callable[[], dict[str, int]], published: Callable[[], dict[str, int]]) -> None:
        self._counts, self._published = counts, published

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for name, value in self._counts().items():
            yield CounterMetricFamily(f"fabricwatch_ingest_{name}", f"The translator's {name}", value=value)
        messages = CounterMetricFamily(
            "fabricwatch_ingest_published", "Snapshots handed to the broker, by outcome", labels=["outcome"]
        )
        for outcome, n in self._published().items():
            messages.add_metric([outcome], n)
        yield messages
