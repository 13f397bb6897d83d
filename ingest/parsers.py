"""Parsers of real tool output into ``{raw counter name: value}`` dicts, before any mapping.

They keep vendor names untouched (the mapping table decides what they mean) and refuse garbled
input loudly: a truncated ``ethtool -S`` or a COUNTERS_DB hash with a non-numeric stat must not turn
into silently missing or wrong counters. Every error names the line or key and the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

ETHTOOL_HEADER = "NIC statistics:"
SONIC_PORT_MAP = "COUNTERS_PORT_NAME_MAP"
SONIC_QUEUE_MAP = "COUNTERS_QUEUE_NAME_MAP"
MAX_U64 = 2**64 - 1


class EthtoolStats(NamedTuple):
    """What one ``ethtool -S`` output says: its counters, and one line per line that was skipped."""

    values: dict[str, int]
    problems: list[str]


def parse_ethtool_stats(text: str) -> EthtoolStats:
    """Parse ``ethtool -S <dev>`` output: a ``NIC statistics:`` line, then ``name: value`` lines.

    The name is everything before the last colon, so per-ring names such as bnxt's
    ``[0]: rx_discards`` stay distinct from the port counter ``rx_discards``. Names are stripped
    because some kernels print one with a trailing space (mlx5 ``tx_pause_storm_warning_events ``).

    A bad line costs only itself: it is skipped and described in ``problems`` (not a counter line,
    a value that is not an unsigned 64-bit integer, a name that is not text, a name twice, whose
    two values are both dropped as neither can be trusted, a last line without its end, which may
    be cut mid-number). An output that is not ``ethtool -S`` at all, or has no counter, raises."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip()), None)
    if start is None:
        raise ValueError("ethtool -S output is empty")
    if lines[start].strip() != ETHTOOL_HEADER:
        raise ValueError(f"line {start + 1}: expected {ETHTOOL_HEADER!r}, got {lines[start]!r}")
    stats: dict[str, int] = {}
    twice: set[str] = set()
    problems: list[str] = []
    last = len(lines) if text.endswith("\n") else len(lines) - 1
    for lineno, line in enumerate(lines[start + 1 :], start=start + 2):
        if not line.strip():
            continue
        if lineno > last:
            problems.append(f"line {lineno}: cut short (no end of line): {line.strip()!r}")
            continue
        try:
            name, value = _ethtool_line(line, lineno)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if name in stats or name in twice:
            twice.add(name)
            problems.append(f"line {lineno}: counter {name!r} appears twice; both values dropped")
            continue
        stats[name] = value
    for name in twice:
        stats.pop(name, None)
    if not stats:
        raise ValueError(f"ethtool -S output has no counter{_first(problems)}")
    return EthtoolStats(stats, problems)


def _first(problems: list[str]) -> str:
    return f" ({problems[0]}{' and more' if len(problems) > 1 else ''})" if problems else ""


def _ethtool_line(line: str, lineno: int) -> tuple[str, int]:
    name, sep, value = line.rpartition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        raise ValueError(f"line {lineno}: expected '<name>: <value>', got {line.strip()!r}")
    if "\ufffd" in name or not name.isprintable():
        raise ValueError(f"line {lineno}: counter name is not text: {name!r}")
    if not _is_uint(value) or int(value) > MAX_U64:
        raise ValueError(f"line {lineno}: value of {name!r} is not an unsigned 64-bit integer: {value!r}")
    return name, int(value)


def read_sysfs_port(port_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Read ``counters/`` and ``hw_counters/`` of one ``/sys/class/infiniband/<dev>/ports/<n>``.

    Files that cannot be read or do not hold one integer are skipped: drivers expose counters the
    firmware does not support as files that fail with EINVAL on read, and hw_counters also holds
    settings. Either directory may be missing (not every driver has hw_counters).
    """
    counters_dir, hw_dir = port_dir / "counters", port_dir / "hw_counters"
    if not counters_dir.is_dir() and not hw_dir.is_dir():
        raise ValueError(f"{port_dir}: no counters/ or hw_counters/ directory; not an InfiniBand port")
    return _read_int_files(counters_dir), _read_int_files(hw_dir)


def _read_int_files(directory: Path) -> dict[str, int]:
    if not directory.is_dir():
        return {}
    values: dict[str, int] = {}
    for path in sorted(directory.iterdir()):
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if _is_uint(text) and int(text) <= MAX_U64:
            values[path.name] = int(text)
    return values


def parse_sonic_counters_db(
    obj: Mapping[str, Any],
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Per-port and per-queue counters from COUNTERS_DB hashes (the shape of SONiC's mock tables).

    Ports come from ``COUNTERS_PORT_NAME_MAP`` (name -> ``oid:0x...``), queues from
    ``COUNTERS_QUEUE_NAME_MAP`` when present (``Ethernet0:3`` -> oid); each object's counters are the
    hash ``COUNTERS:<oid>``. Objects without a hash are skipped: SONiC maps queues whose counters are
    not polled. SAI stats must be integers; other fields (PFC watchdog state such as
    ``PFC_WD_STATUS: stormed``) are kept only when numeric.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"COUNTERS_DB: expected an object of hashes, got {type(obj).__name__}")
    if SONIC_PORT_MAP not in obj:
        raise ValueError(f"{SONIC_PORT_MAP}: missing; cannot tell which hash belongs to which port")
    ports = _objects(obj, _name_map(obj, SONIC_PORT_MAP))
    queues = _objects(obj, _name_map(obj, SONIC_QUEUE_MAP)) if SONIC_QUEUE_MAP in obj else {}
    return ports, queues


def _name_map(obj: Mapping[str, Any], key: str) -> dict[str, str]:
    names = obj[key]
    if not isinstance(names, Mapping):
        raise ValueError(f"{key}: expected a hash of name -> oid, got {type(names).__name__}")
    for name, oid in names.items():
        if not isinstance(oid, str) or not oid.startswith("oid:"):
            raise ValueError(f"{key}: {name!r} maps to {oid!r}, not an 'oid:0x...' object id")
    return dict(names)


def _objects(obj: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for name, oid in names.items():
        key = f"COUNTERS:{oid}"
        if key in obj:
            found[name] = _sonic_hash(key, name, obj[key])
    return found


def _sonic_hash(key: str, name: str, fields: Any) -> dict[str, int]:
    if not isinstance(fields, Mapping):
        raise ValueError(f"{key} ({name}): expected a hash, got {type(fields).__name__}")
    counters: dict[str, int] = {}
    for field, value in fields.items():
        text = str(value).strip()
        if _is_uint(text):
            counters[field] = int(text)
        elif field.startswith("SAI_"):
            raise ValueError(f"{key} ({name}) field {field}: not a non-negative integer: {value!r}")
    return counters


def _is_uint(text: str) -> bool:
    # str.isdigit alone accepts '²' and int() accepts '1_000'; counters are plain ASCII digits
    return text.isascii() and text.isdigit()
