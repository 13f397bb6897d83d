"""gNMI telemetry as gnmic and Telegraf write it to Kafka, read into points: one value of one leaf of
one device at one time, its path without keys or module prefixes and its keys beside it.

The three shapes (each with its source):

* gnmic ``format: event`` (openconfig/gnmic docs, user_guide/event_processors/intro.md): a list of
  ``{"name", "timestamp" (ns), "tags": {"source", "subscription-name", "<elem>_<key>": ...},
  "values": {"/path/to/leaf": value}}``;
* gnmic ``format: json`` (docs/user_guide/outputs/output_intro.md, basic_usage.md):
  ``{"source", "subscription-name", "timestamp" (ns), "prefix": "state/port[port-id=1/1/c1/1]/statistics",
  "updates": [{"Path": "in-packets", "values": {"in-packets": "12142"}}]}``; a value may be a
  JSON-IETF container, flattened here;
* Telegraf's ``json`` serializer over its gnmi input (influxdata/telegraf issues #9806, #11778,
  #14530): ``{"name": measurement, "tags": {"source", "path", "name": <interface>, ...}, "fields":
  {"in_octets": ...}, "timestamp": seconds}``, or a batch ``{"metrics": [...]}``; the field is the
  leaf with ``-`` written ``_``, under the ``path`` tag.

Counters come as JSON numbers or, for uint64, as decimal strings (gNMI's JSON encoding). A message
without a timestamp or a source gives no points and one problem; values that are not counters
(state strings, booleans) are left out quietly, since subscriptions carry them beside counters,
except the text leaves the topology is built from (``TEXT_LEAVES``: a port's LLDP neighbour and its
speed), which come out as ``texts``. A gnmic event's ``deletes`` (pkg/formatters/event.go: the
path without keys, the keys as tags) under an LLDP tree come out as texts with an empty value: the
neighbour is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple

Format = Literal["gnmic", "telegraf"]
_MAX_U64 = (1 << 64) - 1
LLDP_ROOTS = ("/lldp", "/system/lldp")
"""OpenConfig's LLDP tree, and SR Linux's native one."""
LLDP_NEIGHBOURS = ("/lldp/interfaces/interface/neighbors/neighbor/state", "/system/lldp/interface/neighbor")
PORT_SPEED = "/interfaces/interface/ethernet/state/port-speed"
TEXT_LEAVES = frozenset(
    [
        *(
            f"{base}/{leaf}"
            for base in LLDP_NEIGHBOURS
            for leaf in ("system-name", "port-id", "port-id-type", "port-description", "chassis-id")
        ),
        PORT_SPEED,
    ]
)
"""The text leaves kept: a neighbour's state (openconfig-lldp; SR Linux's srl_nokia-lldp, whose
gnmic events the gnmic docs' topology-cloning action reads: docs/user_guide/actions/actions.md)
and a port's speed (openconfig-if-ethernet)."""


TRANSCEIVER = "/interfaces/interface/state/transceiver"
"""openconfig-platform-transceiver's reference from an interface to its transceiver component: the
component whose diagnostics are the port's optics (``optics.py``)."""
_CHANNEL = "/components/component/transceiver/physical-channels/channel/state"
_THRESHOLD = "/components/component/transceiver/thresholds/threshold/state"
OPTIC_LEAVES = frozenset(
    {
        f"{_CHANNEL}/input-power/instant",
        f"{_CHANNEL}/output-power/instant",
        f"{_CHANNEL}/laser-bias-current/instant",
        "/components/component/state/temperature/instant",
        f"{_THRESHOLD}/input-power-lower",
        f"{_THRESHOLD}/output-power-lower",
        f"{_THRESHOLD}/laser-bias-current-upper",
        f"{_THRESHOLD}/module-temperature-upper",
    }
)
"""A transceiver's readings (per physical channel: dBm, dBm, mA; the component's temperature in
degrees C) and its thresholds per severity (openconfig-platform-transceiver 1.0.0): decimals, kept
as floats, keyed by component rather than by interface."""


STATE_LEAVES: dict[str, dict[str, int]] = {
    "/interfaces/interface/state/oper-status": {
        "UP": 0,
        "DOWN": 1,
        "LOWER_LAYER_DOWN": 1,
        "NOT_PRESENT": 1,
        "DORMANT": 1,
    },
    "/interfaces/interface/state/admin-status": {"UP": 0, "DOWN": 1},
    "/interface/oper-state": {"UP": 0, "DOWN": 1},
    "/interface/admin-state": {"ENABLE": 0, "DISABLE": 1},
}
"""A port's state as the vocabulary's gauges (``oper_down``, ``admin_down``): 1 down, 0 up.
OpenConfig's enumerations (openconfig-interfaces: ``oper-status`` UP, DOWN, LOWER_LAYER_DOWN,
NOT_PRESENT, DORMANT, TESTING, UNKNOWN; ``admin-status`` UP, DOWN, TESTING) and SR Linux's
(``oper-state`` up/down, ``admin-state`` enable/disable). TESTING and UNKNOWN give no value: a
state we cannot read as up or down is unknown, never up."""


_SPEEDS_MBPS = {
    "SPEED_10MB": 10,
    "SPEED_100MB": 100,
    "SPEED_1GB": 1_000,
    "SPEED_2500MB": 2_500,
    "SPEED_5GB": 5_000,
    "SPEED_10GB": 10_000,
    "SPEED_25GB": 25_000,
    "SPEED_40GB": 40_000,
    "SPEED_50GB": 50_000,
    "SPEED_100GB": 100_000,
    "SPEED_200GB": 200_000,
    "SPEED_400GB": 400_000,
    "SPEED_600GB": 600_000,
    "SPEED_800GB": 800_000,
    "SPEED_1600GB": 1_600_000,
}
STATE_LEAVES["/interfaces/interface/ethernet/state/negotiated-port-speed"] = _SPEEDS_MBPS
"""openconfig-if-ethernet's ``ETHERNET_SPEED`` identities as the ``link_speed_mbps`` gauge: the
speed a port's link came up at. SPEED_UNKNOWN gives no value."""


class Point(NamedTuple):
    device: str
    ts_ns: int
    path: str
    """Schema path: ``/interfaces/interface/state/counters/in-octets``."""
    keys: dict[str, str]
    """``<elem>_<key>`` -> value (gnmic's tag names), e.g. ``interface_name: Ethernet1/1``."""
    value: int | float | str
    """A counter; an optic's reading (``OPTIC_LEAVES``, a float); for a text leaf (``TEXT_LEAVES``,
    ``TRANSCEIVER``) its text, ``""`` when it was deleted."""


class Parsed(NamedTuple):
    points: list[Point]
    """Counters."""
    problems: list[str]
    texts: list[Point]
    """Text leaves, and deletes under an LLDP tree."""


def parse_message(fmt: Format, raw: bytes) -> Parsed:
    """The points of one Kafka message of gnmic (event or json format, told apart by shape) or
    Telegraf (json serializer)."""
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Parsed([], [f"not JSON: {exc}"], [])
    if fmt == "telegraf":
        metrics = obj.get("metrics", [obj]) if isinstance(obj, dict) else obj
        return _gather(_telegraf_metric, metrics)
    events = obj if isinstance(obj, list) else [obj]
    return _gather(_gnmic_object, events)


def _gather(read: Any, objects: Any) -> Parsed:
    points: list[Point] = []
    problems: list[str] = []
    if not isinstance(objects, list):
        return Parsed([], [f"expected an object or a list of them, got {type(objects).__name__}"], [])
    for obj in objects:
        if not isinstance(obj, dict):
            problems.append(f"expected an object, got {type(obj).__name__}")
            continue
        try:
            points.extend(read(obj))
        except ValueError as exc:
            problems.append(str(exc))
    texts = [p for p in points if isinstance(p.value, str) and p.path != TRANSCEIVER]
    if texts:
        points = [p for p in points if not isinstance(p.value, str) or p.path == TRANSCEIVER]
    return Parsed(points, problems, texts)


def _gnmic_object(obj: Mapping[str, Any]) -> Iterator[Point]:
    if "updates" in obj or "prefix" in obj:
        return _gnmic_json(obj)
    return _gnmic_event(obj)


def _gnmic_event(event: Mapping[str, Any]) -> Iterator[Point]:
    if "values" not in event and "deletes" not in event:
        looks = "Telegraf's JSON (use `fabricwatch ingest telegraf`)" if "fields" in event else "no event"
        raise ValueError(f"a gnmic event without values or deletes: {looks}")
    tags = event.get("tags") or {}
    device = _device(tags.get("source"), "gnmic event")
    ts_ns = _timestamp(event.get("timestamp"), 1, "gnmic event")
    keys = {k: str(v) for k, v in tags.items() if k not in ("source", "subscription-name")}
    for path, value in (event.get("values") or {}).items():
        schema, path_keys = split_path(path)
        yield from points_of(device, ts_ns, schema, {**keys, **path_keys}, value)
    for path in event.get("deletes") or []:
        schema, path_keys = split_path(str(path))
        if any(schema == root or schema.startswith(root + "/") for root in LLDP_ROOTS):
            yield Point(device, ts_ns, schema, {**keys, **path_keys}, "")


def _gnmic_json(msg: Mapping[str, Any]) -> Iterator[Point]:
    device = _device(msg.get("source"), "gnmic json message")
    ts_ns = _timestamp(msg.get("timestamp"), 1, "gnmic json message")
    prefix = str(msg.get("prefix") or "")
    for update in msg.get("updates") or []:
        path = "/".join(p for p in (prefix.strip("/"), str(update.get("Path", "")).strip("/")) if p)
        schema, keys = split_path(path)
        for value in (update.get("values") or {}).values():
            # the value's key repeats the path (or names it from the schema root): a scalar is the
            # path's leaf, a container's members are leaves below it
            yield from points_of(device, ts_ns, schema, keys, value)


def _telegraf_metric(metric: Mapping[str, Any]) -> Iterator[Point]:
    if "fields" not in metric:  # found: gnmic's events fed here gave 0 points and 0 problems
        looks = "gnmic's event format (use `fabricwatch ingest gnmic`)" if "values" in metric else "no metric"
        raise ValueError(f"a Telegraf metric without fields: {looks}")
    tags = metric.get("tags") or {}
    device = _device(tags.get("source"), "Telegraf metric")
    ts_ns = _timestamp(metric.get("timestamp"), None, "Telegraf metric")
    base, path_keys = split_path(str(tags.get("path") or ""))
    keys = {k: str(v) for k, v in tags.items() if k not in ("source", "path", "host")}
    for field, value in (metric.get("fields") or {}).items():
        leaf = field.replace("_", "-")
        path = f"{base}/{leaf}" if base != "/" else f"/{leaf}"
        yield from points_of(device, ts_ns, path, {**keys, **path_keys}, value)


def points_of(device: str, ts_ns: int, path: str, keys: dict[str, str], value: Any) -> Iterator[Point]:
    """The counters in one value at ``path``: the value itself, or a container's leaves below it."""
    if isinstance(value, dict):
        for name, inner in value.items():
            leaf = name.rpartition(":")[2]
            yield from points_of(device, ts_ns, f"{path}/{leaf}", keys, inner)
        return
    if path in OPTIC_LEAVES:
        reading = _decimal(value)
        if reading is not None:
            yield Point(device, ts_ns, path, keys, reading)
        return
    if path == TRANSCEIVER:
        if isinstance(value, str) and value:
            yield Point(device, ts_ns, path, keys, value)
        return
    states = STATE_LEAVES.get(path)
    if states is not None:
        state = states.get(value.rpartition(":")[2].upper()) if isinstance(value, str) else None
        if state is not None:
            yield Point(device, ts_ns, path, keys, state)
        return
    number = _counter(value)
    if number is not None:
        yield Point(device, ts_ns, path, keys, number)
    elif isinstance(value, str) and value and path in TEXT_LEAVES:
        yield Point(device, ts_ns, path, keys, value)


def _decimal(value: Any) -> float | None:
    """A decimal64 as gNMI's JSON carries it (a number, or a string: "-2.31", "-inf")."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def split_path(path: str) -> tuple[str, dict[str, str]]:
    """``openconfig:/interfaces/interface[name=Ethernet1/1]/state/counters/in-octets`` ->
    (``/interfaces/interface/state/counters/in-octets``, ``{"interface_name": "Ethernet1/1"}``):
    origin and module prefixes dropped, keys (which may hold ``/``) taken out."""
    elems: list[str] = []
    keys: dict[str, str] = {}
    name, depth, key_text = "", 0, ""
    for ch in path + "/":
        if depth:
            if ch == "]":
                depth = 0
                k, _, v = key_text.partition("=")
                keys[f"{_bare(name)}_{k}"] = v
                key_text = ""
            else:
                key_text += ch
        elif ch == "[":
            depth = 1
        elif ch == "/":
            if _bare(name):  # an origin alone (``openconfig:``) is no element
                elems.append(_bare(name))
            name = ""
        else:
            name += ch
    return "/" + "/".join(elems), keys


def _bare(name: str) -> str:
    """An element without its origin or module prefix (``openconfig-interfaces:counters``)."""
    return name.rpartition(":")[2]


def _counter(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= _MAX_U64 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) <= _MAX_U64:
        return int(value)
    return None


def _device(source: Any, what: str) -> str:
    if not isinstance(source, str) or not source:
        raise ValueError(f"{what} without a source (which device is it?)")
    host, sep, port = source.rpartition(":")
    return host if sep and port.isdigit() and "]" not in port else source


def _timestamp(value: Any, unit_ns: int | None, what: str) -> int:
    """Nanoseconds since the epoch; ``unit_ns`` None: seconds, ms, us or ns told by magnitude
    (Telegraf's ``json_timestamp_units``)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, float) and value > 0:
        value = round(value) if unit_ns == 1 else value
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} without a timestamp")
    if unit_ns is None:
        unit_ns = 10**9 if value < 1e11 else 10**6 if value < 1e14 else 10**3 if value < 1e17 else 1
    return int(value * unit_ns)
