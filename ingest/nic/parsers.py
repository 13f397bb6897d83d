"""Parsers of real tool output into ``{raw counter name: value}`` dicts, before any mapping.

They keep vendor names untouched (the mapping table decides what they mean) and refuse garbled
input loudly: a truncated ``ethtool -S`` or a COUNTERS_DB hash with a non-numeric stat must not turn
into silently missing or wrong counters. Every error names the line or key and the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

ETHTOOL_HEADER = "NIC statistics:"
SONIC_PORT_MAP = "COUNTERS_PORT_NAME_MAP"
SONIC_QUEUE_MAP = "COUNTERS_QUEUE_NAME_MAP"
MAX_U64 = 2**64 - 1
_COUNTER_NAME = re.compile(r"(\[\d+\]: ?)?\S+")
"""A counter's name: no blank inside, after bnxt's per-ring ``[0]: `` prefix."""


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


class RdmaStatistic(NamedTuple):
    """What one ``rdma statistic show`` output says: each link's counters, and what was skipped."""

    links: dict[tuple[str, int], dict[str, int]]
    """(RDMA device, port) -> counter name -> value: the names hw_counters files have."""
    problems: list[str]


def parse_rdma_statistic(text: str) -> RdmaStatistic:
    """Parse ``rdma statistic show`` (iproute2, rdma/stat.c ``stat_show_parse_cb``) in any of its
    three forms: a line per link (``link mlx5_0/1 rx_write_requests 0 out_of_buffer 135 ...``),
    the pretty form (``-p``: ``link mlx5_0/1`` then one indented ``name value`` per line), or JSON
    (``-j``: ``[{"ifname": "mlx5_0", "port": 1, "out_of_buffer": 135, ...}]``).

    A counter's name may hold spaces (irdma's ``RNR sent``): in text, a name runs until the
    number after it. The netlink path also carries the optional counters (mlx5 ``cc_rx_ce_pkts``,
    turned on with ``rdma statistic set link ... optional-counters``), which sysfs never shows.
    What cannot be read costs only itself and is described in ``problems``: a link line without
    ``DEV/PORT``, a name without a value, a value that is not an unsigned 64-bit integer, a counter
    twice in one link (both values dropped). Output with no link at all raises."""
    stripped = text.lstrip()
    if not stripped:
        raise ValueError("rdma statistic output is empty")
    links, problems = (_rdma_json if stripped[0] in "[{" else _rdma_text)(stripped)
    if not links:
        raise ValueError(f"rdma statistic output has no link{_first(problems)}")
    return RdmaStatistic(links, problems)


def _rdma_json(text: str) -> tuple[dict[tuple[str, int], dict[str, int]], list[str]]:
    import json

    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"rdma statistic output is not valid JSON: {exc}") from None
    links: dict[tuple[str, int], dict[str, int]] = {}
    problems: list[str] = []
    for i, obj in enumerate(doc if isinstance(doc, list) else [doc]):
        dev, port = (obj.get("ifname"), obj.get("port")) if isinstance(obj, dict) else (None, None)
        if not isinstance(dev, str) or not isinstance(port, int) or isinstance(port, bool) or port < 1:
            problems.append(f"entry {i}: expected an object with ifname and port, got {str(obj)[:80]!r}")
            continue
        counters: dict[str, int] = {}
        for name, value in obj.items():
            if name in ("ifindex", "ifname", "port"):
                continue
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_U64:
                counters[name] = value
            else:
                problems.append(_not_u64(f"{dev}/{port}", name, value))
        links[(dev, port)] = counters
    return links, problems


def _rdma_text(text: str) -> tuple[dict[tuple[str, int], dict[str, int]], list[str]]:
    """Both text forms: a ``link DEV/PORT`` token starts a link; every other token belongs to the
    current link's ``name value`` pairs, whichever line it is on."""
    tokens: dict[tuple[str, int], list[tuple[int, str]]] = {}
    problems: list[str] = []
    current: list[tuple[int, str]] | None = None  # the current link's (line number, token)
    for lineno, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if words[:1] == ["link"]:
            link = _rdma_link(words[1] if len(words) > 1 else "", lineno, problems)
            current = tokens.setdefault(link, []) if link is not None else None
            words = words[2:]
        elif current is None and words:
            problems.append(f"line {lineno}: counters outside a link: {line.strip()[:80]!r}")
        if current is not None:
            current += [(lineno, word) for word in words]
    return {link: _rdma_pairs(link, pairs, problems) for link, pairs in tokens.items()}, problems


def _rdma_link(token: str, lineno: int, problems: list[str]) -> tuple[str, int] | None:
    dev, sep, port = token.rpartition("/")
    if not sep or not dev or not _is_uint(port) or int(port) == 0:
        problems.append(f"line {lineno}: expected 'link DEV/PORT', got {token!r}; its counters skipped")
        return None
    return (dev, int(port))


def _rdma_pairs(link: tuple[str, int], pairs: list[tuple[int, str]], problems: list[str]) -> dict[str, int]:
    """``name value`` pairs from tokens; a name is every token up to the next number."""
    where = f"{link[0]}/{link[1]}"
    counters: dict[str, int] = {}
    twice: set[str] = set()
    name: list[str] = []
    for lineno, token in pairs:
        if not _is_uint(token):
            name.append(token)
            continue
        counter, name = " ".join(name), []
        if not counter:
            problems.append(f"line {lineno}: {where}: a value without a name: {token!r}")
        elif int(token) > MAX_U64:
            problems.append(f"line {lineno}: {_not_u64(where, counter, token)}")
        elif counter in counters or counter in twice:
            twice.add(counter)
            problems.append(f"line {lineno}: {where}: counter {counter!r} appears twice; both dropped")
        else:
            counters[counter] = int(token)
    if name:
        problems.append(f"{where}: {' '.join(name)!r} has no value (output cut short?)")
    for counter in twice:
        counters.pop(counter, None)
    return counters


def _not_u64(where: str, name: str, value: Any) -> str:
    return f"{where}: value of {name!r} is not an unsigned 64-bit integer: {value!r}"


def _first(problems: list[str]) -> str:
    return f" ({problems[0]}{' and more' if len(problems) > 1 else ''})" if problems else ""


def _ethtool_line(line: str, lineno: int) -> tuple[str, int]:
    name, sep, value = line.rpartition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        raise ValueError(f"line {lineno}: expected '<name>: <value>', got {line.strip()!r}")
    if "\ufffd" in name or not name.isprintable():
        raise ValueError(f"line {lineno}: counter name is not text: {name!r}")
    if not _COUNTER_NAME.fullmatch(name):  # found (issue 33, 6): a counter that vanished without a word
        raise ValueError(
            f"line {lineno}: not one counter's name (a line cut and joined with the next?): {name!r}"
        )
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


_IB_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?) Gb/sec")
_IB_STATE_DOWN = {"1": 1, "4": 0, "5": 0}
"""IB port states (``ib_verbs.h``): 1 DOWN; 4 ACTIVE and 5 ACTIVE_DEFER are up. INIT and ARMED
(a link up whose port the subnet manager has not activated) say nothing of the link's health."""


def read_port_link(port_dir: Path) -> dict[str, int]:
    """The port's link as two gauges, from its ``rate`` ("400 Gb/sec (4X NDR)", what the link came
    up at: ``rate`` in Mb/s) and ``state`` ("4: ACTIVE": ``state`` 0 up, 1 down) attribute files,
    on RoCE and InfiniBand ports alike. What cannot be read or parsed is left out: unknown."""
    out: dict[str, int] = {}
    rate = _read_attribute(port_dir / "rate")
    found = _IB_RATE.match(rate or "")
    if found:
        out["rate"] = round(float(found.group(1)) * 1000)
    state = (_read_attribute(port_dir / "state") or "").partition(":")[0].strip()
    if state in _IB_STATE_DOWN:
        out["state"] = _IB_STATE_DOWN[state]
    return out


def _read_attribute(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


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
