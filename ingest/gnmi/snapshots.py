"""gNMI points into device snapshots: one snapshot per device per sample, mapped onto the canonical
counters through ``schemas/data/vendor_map.csv`` (sources ``openconfig`` and ``srlinux``).

gNMI delivers a sample as many notifications, often one leaf each, and interleaves devices. Points
of one device whose timestamps lie within ``window_s`` of the first point of its open sample are
merged into that sample. The sample is complete when the device's next sample starts (a later
timestamp), or when ``grace_s`` of wall time passes without the next one (a device that stopped,
or the end of the stream).

A leaf that is missing from a sample is missing (unknown) in its snapshot, never its previous value:
carried forward, a leaf merely late would read as zero traffic and then as double. The rate engine
holds its last value and takes the rate over the whole gap when it returns (``detectors/rates.py``).
A transceiver's diagnostics are the exception: gauges of a component rather than counters of a
port, kept as last said and sent with the port that names the component (``optics.py``).
A point older than the device's open sample, or than what was already sent, is late; a second
value of a leaf within one sample replaces the first. Both are counted, as are unknown paths,
points without a port key, and queue names without an index.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from fabricwatch.ingest.gnmi.messages import Point
from fabricwatch.ingest.gnmi.optics import DeviceOptics
from fabricwatch.ingest.mapping import port_order, resolve, vendor_names
from fabricwatch.schemas.messages import CounterSpec, Snapshot

SOURCES = ("openconfig", "srlinux")
PORT_KEYS = ("interface_name", "interface_interface-id", "interface_id", "interface-id")
QUEUE_KEYS = ("queue_name", "queue")
_DIGITS = re.compile(r"(\d+)$")

ColumnKey = tuple[str, int]


@dataclass
class GnmiStats:
    points: int = 0
    snapshots: int = 0
    late: int = 0
    duplicates: int = 0
    unknown_paths: int = 0
    without_port: int = 0
    closed_by_grace: int = 0


@dataclass
class _Sample:
    first_ts: int
    last_ts: int
    opened: float
    values: dict[tuple[str, ColumnKey], int] = field(default_factory=dict)


@dataclass
class _Device:
    ports: dict[str, None] = field(default_factory=dict)
    columns: dict[ColumnKey, CounterSpec] = field(default_factory=dict)
    optics: DeviceOptics = field(default_factory=DeviceOptics)
    sample: _Sample | None = None
    sent_ts: int = 0


class SnapshotAssembler:
    """Feed points with ``add``; it returns the snapshots that completed. ``due`` closes samples
    whose grace period passed, ``close`` all that are open."""

    def __init__(
        self,
        window_s: float = 0.25,
        grace_s: float = 2.0,
        warn: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stats = GnmiStats()
        self._window_ns = int(window_s * 1e9)
        self._grace_s = grace_s
        self._warn = warn
        self._clock = clock
        self._devices: dict[str, _Device] = {}
        self._columns: dict[tuple[str, str], tuple[str, CounterSpec] | None] = {}
        self._said: set[str] = set()

    def add(self, points: Iterable[Point]) -> list[Snapshot]:
        done: list[Snapshot] = []
        now = self._clock()
        for point in points:
            self.stats.points += 1
            if self._devices.setdefault(point.device, _Device()).optics.take(
                point, port_and_queue(point.keys)[0]
            ):
                continue  # kept by the device, said with its ports at each snapshot
            located = self._locate(point)
            if located is None:
                continue
            port, spec = located
            device = self._devices.setdefault(point.device, _Device())
            sample = device.sample
            if point.ts_ns <= device.sent_ts or (sample is not None and point.ts_ns < sample.first_ts):
                self.stats.late += 1
                continue
            if sample is not None and point.ts_ns > sample.first_ts + self._window_ns:
                done.append(self._send(point.device, device))
                sample = None
            if sample is None:
                sample = device.sample = _Sample(point.ts_ns, point.ts_ns, now)
            key = (spec.name, -1 if spec.index is None else spec.index)
            device.ports.setdefault(port)
            device.columns.setdefault(key, spec)
            if (port, key) in sample.values:
                self.stats.duplicates += 1
            sample.values[(port, key)] = point.value
            sample.last_ts = max(sample.last_ts, point.ts_ns)
        return done

    def due(self) -> list[Snapshot]:
        """Samples open for longer than the grace period, closed."""
        now = self._clock()
        done = []
        for name, device in self._devices.items():
            if device.sample is not None and now - device.sample.opened >= self._grace_s:
                self.stats.closed_by_grace += 1
                done.append(self._send(name, device))
        return done

    def close(self) -> list[Snapshot]:
        return [self._send(n, d) for n, d in self._devices.items() if d.sample is not None]

    def _send(self, name: str, device: _Device) -> Snapshot:
        sample = device.sample
        assert sample is not None
        device.sample = None
        device.sent_ts = sample.last_ts
        ports = sorted(device.ports, key=port_order)
        for port in ports:
            for gauge, value in device.optics.gauges(port, sample.last_ts).items():
                device.columns.setdefault((gauge, -1), CounterSpec(gauge, "gauge", 64))
                sample.values[(port, (gauge, -1))] = value
        keys = sorted(device.columns)
        values = [[sample.values.get((port, key)) for key in keys] for port in ports]
        self.stats.snapshots += 1
        return Snapshot(
            device=name,
            device_kind="switch",
            ts_ns=sample.last_ts,
            counters=[device.columns[k] for k in keys],
            ports=ports,
            values=values,
            source="gnmi",
        )

    def _locate(self, point: Point) -> tuple[str, CounterSpec] | None:
        """The port and column of a point, or None (counted, said once) when it has none."""
        port, queue = port_and_queue(point.keys)
        column = self._column(point.path, queue)
        if column is None:
            self._once(f"path:{point.path}", f"{point.path}: no counter of ours (said once per path)")
            self.stats.unknown_paths += 1
            return None
        if port is None:
            self.stats.without_port += 1
            self._once(f"port:{point.path}", f"{point.path}: no interface key in {point.keys}; left out")
            return None
        return port, column[1]

    def _column(self, path: str, queue: str | None) -> tuple[str, CounterSpec] | None:
        index = None
        if queue is not None:
            digits = _DIGITS.search(queue)
            index = digits[1] if digits else None
        cache_key = (path, index or "")
        if cache_key not in self._columns:
            self._columns[cache_key] = _resolve(path, index)
        return self._columns[cache_key]

    def _once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self._warn(text)


def _resolve(path: str, index: str | None) -> tuple[str, CounterSpec] | None:
    """The column of a path: its row, or else the one column every row with its leaf name under
    its prefix gives. Telegraf writes a leaf under its subscription's path, without the containers
    between (``/interfaces/interface`` + ``in_octets``), or under nothing when ``path`` is excluded."""
    suffix = "" if index is None else f":{index}"
    for source in SOURCES:
        spec = resolve(source, path + suffix)
        if spec is not None:
            return source, spec
    prefix, _, leaf = path.rpartition("/")
    found = {
        (source, spec.name, spec.index): spec
        for source, full in _rows_by_leaf().get(leaf, [])
        if full.startswith(prefix + "/")
        for spec in [resolve(source, full + suffix)]
        if spec is not None
    }
    if len({(name, i) for _, name, i in found}) == 1:
        (source, _, _), spec = next(iter(found.items()))
        return source, spec
    return None


@cache
def _rows_by_leaf() -> dict[str, list[tuple[str, str]]]:
    """Leaf name -> (source, path) of every gNMI row (queue rows without their ``:{n}``)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for source in SOURCES:
        for name in vendor_names(source):
            full = name.removesuffix(":{n}")
            out.setdefault(full.rpartition("/")[2], []).append((source, full))
    return out


def port_and_queue(keys: dict[str, str]) -> tuple[str | None, str | None]:
    """The interface a point belongs to and its queue's name. Telegraf names a key by its key
    name alone: a queue's ``name`` beside an ``interface_id`` is the queue's."""
    port = next((keys[k] for k in PORT_KEYS if k in keys), None)
    queue = next((keys[k] for k in QUEUE_KEYS if k in keys), None)
    if "name" in keys:
        if port is None:
            port = keys["name"]
        elif queue is None:
            queue = keys["name"]
    return port, queue
