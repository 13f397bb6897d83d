"""``/metrics`` and ``/healthz`` for the consumer daemons that have no frame of their own (the sink
and the alerter): counts read from the daemon's stats at scrape time (nothing to keep in step), a
lag gauge, and a health check of the daemon's loop.

Healthy means the consumer's loop turned within ``stale_s``: a sink waiting out a ClickHouse
outage or an alerter retrying a receiver is healthy (its loop turns, and a restart would not help;
the detail and the counters say what it is waiting for), a loop stuck on a hung call is not."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

Counts = Callable[[], Mapping[str, float]]


class DaemonMetrics:
    """A prometheus-client registry for one consumer daemon: ``counters()`` as ``<prefix>_<name>_total``,
    ``gauges()`` as ``<prefix>_<name>``; labelled families as ``{(name, label): {value: n}}``."""

    def __init__(
        self,
        prefix: str,
        counters: Counts,
        gauges: Counts,
        turned_at: Callable[[], float],
        problem: Callable[[], str] = lambda: "",
        labelled: Callable[[], Mapping[tuple[str, str], Mapping[str, float]]] = dict,
        stale_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(prefix, counters, gauges, labelled))
        self._turned_at, self._problem, self._stale_s, self._clock = turned_at, problem, stale_s, clock

    def health(self) -> tuple[bool, str]:
        since = self._clock() - self._turned_at()
        if since > self._stale_s:
            return False, f"the consumer's loop has not turned for {since:.0f} s"
        problem = self._problem()
        return True, f"ok: loop turned {since:.1f} s ago" + (f"; {problem}" if problem else "")


class _Families:
    def __init__(
        self,
        prefix: str,
        counters: Counts,
        gauges: Counts,
        labelled: Callable[[], Mapping[tuple[str, str], Mapping[str, float]]],
    ) -> None:
        self._prefix, self._counters, self._gauges, self._labelled = prefix, counters, gauges, labelled

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, value in self._counters().items():
            yield CounterMetricFamily(f"{self._prefix}_{name}", name.replace("_", " "), value=value)
        for name, value in self._gauges().items():
            if value is not None:
                yield GaugeMetricFamily(f"{self._prefix}_{name}", name.replace("_", " "), value=value)
        for (name, label), values in self._labelled().items():
            family = CounterMetricFamily(f"{self._prefix}_{name}", name.replace("_", " "), labels=[label])
            for key, value in sorted(values.items()):
                family.add_metric([key], value)
            yield family
