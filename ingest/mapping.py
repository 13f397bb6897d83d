"""Vendor counter names to canonical snapshot columns, driven by ``schemas/data/vendor_map.csv``.

Drivers rename counters between releases and every vendor spells them differently, so the mapping
is a table and this module only compiles it: exact names go into a dict, names with ``{n}`` (a PFC
priority or a queue id) become one regular expression each, compiled once. A collector reports the
same few hundred raw names every poll, so each raw name is resolved once and remembered; mapping a
NIC's ~300 counters then costs one dict lookup per name.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import msgspec

from fabricwatch.schemas.messages import CounterSpec, DeviceKind, Snapshot
from fabricwatch.schemas.vocabulary import CounterDef, canonical

_HEADER = ["source", "vendor_name", "canonical", "width", "scale"]
_WIDTHS = (8, 16, 32, 64)
_INDEX = "{n}"
QUEUE_SEP = ":"
"""Separator between a SONiC queue stat and its queue index in folded raw names (``<SAI name>:3``)."""

ColumnKey = tuple[str, int]
"""(canonical name, index or -1): a column's identity and its sort key."""


@dataclass(frozen=True)
class _Column:
    spec: CounterSpec
    key: ColumnKey
    rank: int  # table line: when two vendor names give the same column, the lower line wins


@dataclass(frozen=True)
class _Pattern:
    vendor_name: str
    regex: re.Pattern[str]
    template: CounterSpec
    rank: int


class _SourceTable:
    """One source's rows, plus every raw name resolved so far (hits and misses alike)."""

    def __init__(self) -> None:
        self.exact: dict[str, _Column] = {}
        self.patterns: list[_Pattern] = []
        self._resolved: dict[str, _Column | None] = {}

    def resolve(self, name: str) -> _Column | None:
        try:
            return self._resolved[name]
        except KeyError:
            column = self._resolved[name] = self._lookup(name)
            return column

    def _lookup(self, name: str) -> _Column | None:
        column = self.exact.get(name)
        if column is not None:
            return column
        for pattern in self.patterns:
            match = pattern.regex.fullmatch(name)
            if match:
                spec = msgspec.structs.replace(pattern.template, index=int(match[1]))
                return _Column(spec, (spec.name, spec.index), pattern.rank)
        return None


def known_sources() -> tuple[str, ...]:
    """Source ids the table knows, in table order."""
    return tuple(_tables())


def port_order(name: str) -> tuple:
    """A sort key putting port names in their numeric order: Ethernet2 before Ethernet10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def vendor_names(source: str) -> list[str]:
    """The vendor names a source's rows list, ``{n}`` left in: what a collector that asks for named
    fields (SONiC's HMGET) asks for."""
    table = _table(source)
    return sorted([*table.exact, *(p.vendor_name for p in table.patterns)])


def resolve(source: str, raw_name: str) -> CounterSpec | None:
    """The column one raw name of ``source`` feeds, or None if the table has no row for it."""
    column = _table(source).resolve(raw_name)
    return None if column is None else column.spec


def map_counters(source: str, raw: Mapping[str, int]) -> tuple[list[CounterSpec], list[int]]:
    """Canonical columns and values of one port's raw counters, sorted by name then index.

    Unknown vendor names are ignored: drivers print hundreds of counters we have no column for.
    """
    mapped = _map(_table(source), raw)
    keys = sorted(mapped)
    return [mapped[k][0].spec for k in keys], [mapped[k][1] for k in keys]


def build_snapshot(
    device: str,
    device_kind: DeviceKind,
    ts_ns: int,
    source: str,
    per_port: Mapping[str, Mapping[str, int]],
) -> Snapshot:
    """One columnar snapshot of every port's raw counters from one source."""
    return build_combined_snapshot(
        device, device_kind, ts_ns, [source], {port: {source: raw} for port, raw in per_port.items()}
    )


def build_combined_snapshot(
    device: str,
    device_kind: DeviceKind,
    ts_ns: int,
    sources: Sequence[str],
    per_port: Mapping[str, Mapping[str, Mapping[str, int]]],
) -> Snapshot:
    """One snapshot from several sources per port (``per_port[port][source] = raw``).

    Sources overlap (a RoCE NIC reports tx_bytes in ethtool and in IB sysfs, with different widths
    and scales), and a column must have one spec for the whole device, so each column comes from
    the first source in ``sources`` that yields it on any port. A port lacking that source's value
    gets None rather than a value from another source with a different wrap width or scale.
    """
    tables = {source: _table(source) for source in sources}
    stray = {source for by_source in per_port.values() for source in by_source} - set(tables)
    if stray:
        raise ValueError(f"per_port names sources {sorted(stray)} that are not in sources {list(sources)}")
    mapped = {
        port: {source: _map(tables[source], raw) for source, raw in by_source.items()}
        for port, by_source in per_port.items()
    }
    winners = _winning_columns(sources, mapped)
    keys = sorted(winners)
    rows = [[_value(mapped[port], winners[key][1], key) for key in keys] for port in per_port]
    given = {source for _, source in winners.values()}
    present = [s for s in sources if s in given]  # a source that gave nothing (every value N/A) is not named
    return Snapshot(
        device=device,
        device_kind=device_kind,
        ts_ns=ts_ns,
        counters=[winners[key][0] for key in keys],
        ports=list(per_port),
        values=rows,
        source="+".join(present),
    )


def build_sonic_snapshot(
    device: str,
    ts_ns: int,
    ports: Mapping[str, Mapping[str, int]],
    queues: Mapping[str, Mapping[str, int]],
) -> Snapshot:
    """A switch snapshot from SONiC port hashes and queue hashes (queue names ``<port>:<index>``).

    Queue counters live on their port's row, one column per queue index, so each queue stat is
    filed under its port as ``<SAI name>:<index>``, the raw name the sonic_queue rows match.
    """
    per_port: dict[str, dict[str, dict[str, int]]] = {
        port: {"sonic_port": dict(raw)} for port, raw in ports.items()
    }
    for queue, raw in queues.items():
        port, index = _split_queue_name(queue)
        folded = per_port.setdefault(port, {}).setdefault("sonic_queue", {})
        for name, value in raw.items():
            folded[f"{name}{QUEUE_SEP}{index}"] = value
    return build_combined_snapshot(device, "switch", ts_ns, ["sonic_port", "sonic_queue"], per_port)


def _split_queue_name(queue: str) -> tuple[str, int]:
    port, sep, index = queue.rpartition(QUEUE_SEP)
    if not sep or not port or not (index.isascii() and index.isdigit()):
        raise ValueError(f"queue name {queue!r}: expected <port>{QUEUE_SEP}<queue index>, e.g. Ethernet0:3")
    return port, int(index)


def _map(table: _SourceTable, raw: Mapping[str, int]) -> dict[ColumnKey, tuple[_Column, int]]:
    mapped: dict[ColumnKey, tuple[_Column, int]] = {}
    for name, value in raw.items():
        column = table.resolve(name)
        if column is None:
            continue
        held = mapped.get(column.key)
        if held is None or column.rank < held[0].rank:
            mapped[column.key] = (column, value)
    return mapped


def _winning_columns(
    sources: Sequence[str], mapped: Mapping[str, Mapping[str, Mapping[ColumnKey, tuple[_Column, int]]]]
) -> dict[ColumnKey, tuple[CounterSpec, str]]:
    winners: dict[ColumnKey, tuple[CounterSpec, str]] = {}
    for source in sources:
        for by_source in mapped.values():
            for key, (column, _) in by_source.get(source, {}).items():
                winners.setdefault(key, (column.spec, source))
    return winners


def _value(
    by_source: Mapping[str, Mapping[ColumnKey, tuple[_Column, int]]], source: str, key: ColumnKey
) -> int | None:
    held = by_source.get(source, {}).get(key)
    return None if held is None else held[1]


def _table(source: str) -> _SourceTable:
    tables = _tables()
    table = tables.get(source)
    if table is None:
        raise ValueError(f"unknown counter source {source!r}; known sources: {', '.join(tables)}")
    return table


@cache
def _tables() -> dict[str, _SourceTable]:
    text = (
        resources.files("fabricwatch.schemas").joinpath("data", "vendor_map.csv").read_text(encoding="utf-8")
    )
    return compile_table(text)


def compile_table(text: str) -> dict[str, _SourceTable]:
    """Compile vendor_map.csv text; a bad row raises ValueError naming its line and the reason."""
    vocabulary = canonical()
    tables: dict[str, _SourceTable] = {}
    first_use: dict[tuple[str, str], tuple[int, CounterSpec]] = {}
    header_seen = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = next(csv.reader([line]))
        if not header_seen:
            if fields != _HEADER:
                raise ValueError(f"vendor_map.csv line {lineno}: header must be {','.join(_HEADER)}")
            header_seen = True
            continue
        source, vendor_name, template = _parse_row(fields, lineno, vocabulary)
        _check_consistent(first_use, source, template, lineno)
        _add(tables.setdefault(source, _SourceTable()), vendor_name, template, lineno)
    return tables


def _parse_row(
    fields: list[str], lineno: int, vocabulary: Mapping[str, CounterDef]
) -> tuple[str, str, CounterSpec]:
    where = f"vendor_map.csv line {lineno}"
    if len(fields) != len(_HEADER):
        raise ValueError(f"{where}: expected {len(_HEADER)} fields, got {len(fields)}")
    source, vendor_name, name, width, scale = (f.strip() for f in fields)
    definition = vocabulary.get(name)
    if definition is None:
        raise ValueError(f"{where}: {name!r} is not a canonical counter (schemas/data/counters.csv)")
    if not width.isdigit() or int(width) not in _WIDTHS:
        raise ValueError(f"{where}: width {width!r} is not one of {_WIDTHS}")
    if not scale.isdigit() or int(scale) < 1:
        raise ValueError(f"{where}: scale {scale!r} is not a positive integer")
    indexed = definition.scope in ("priority", "queue")
    if vendor_name.count(_INDEX) != int(indexed):
        need = f"exactly one {_INDEX}" if indexed else f"no {_INDEX}"
        raise ValueError(f"{where}: {name} has scope {definition.scope}, so {vendor_name!r} needs {need}")
    spec = CounterSpec(name, definition.kind, int(width), None, int(scale))  # type: ignore[arg-type]
    return source, vendor_name, spec


def _check_consistent(
    first_use: dict[tuple[str, str], tuple[int, CounterSpec]], source: str, spec: CounterSpec, lineno: int
) -> None:
    """A column has one wrap width and scale per source, whichever vendor name fed it."""
    earlier = first_use.setdefault((source, spec.name), (lineno, spec))
    if (earlier[1].width, earlier[1].scale) != (spec.width, spec.scale):
        raise ValueError(
            f"vendor_map.csv line {lineno}: {source} {spec.name} has width/scale {spec.width}/{spec.scale}"
            f" but line {earlier[0]} says {earlier[1].width}/{earlier[1].scale}"
        )


def _add(table: _SourceTable, vendor_name: str, spec: CounterSpec, lineno: int) -> None:
    if vendor_name in table.exact or any(p.vendor_name == vendor_name for p in table.patterns):
        raise ValueError(f"vendor_map.csv line {lineno}: {vendor_name!r} is listed twice for this source")
    if _INDEX in vendor_name:
        table.patterns.append(_Pattern(vendor_name, re.compile(_regex(vendor_name)), spec, lineno))
    else:
        table.exact[vendor_name] = _Column(spec, (spec.name, -1), lineno)


def _regex(vendor_name: str) -> str:
    head, _, tail = vendor_name.partition(_INDEX)
    return f"{re.escape(head)}([0-9]+){re.escape(tail)}"
