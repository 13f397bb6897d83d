"""A switch's transceivers as its gNMI stream tells them (openconfig-platform-transceiver): the
readings and thresholds of each transceiver component, and which interface holds which component,
turned into a port's ``optic_*`` gauges (``ingest/optics.py``).

OpenConfig keeps optics under ``/components/component[name=...]``, not under the interface: lanes
under ``transceiver/physical-channels/channel[index=N]/state`` (input and output power in dBm,
laser bias in mA), the module's temperature under the component's own ``state``, and thresholds
under ``transceiver/thresholds/threshold[severity=...]/state`` (``-lower`` and ``-upper`` leaves).
An interface names its transceiver in ``/interfaces/interface/state/transceiver``. Thresholds of
severity CRITICAL or MAJOR are the alarm thresholds ("an implementation's highest severity
threshold should be mapped to CRITICAL"), MINOR or WARNING the warning ones.

Readings are kept as last said (a SAMPLE stream repeats them, ON_CHANGE sends them when they
change): each snapshot of the device carries its ports' latest optics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fabricwatch.ingest.gnmi.messages import OPTIC_LEAVES, TRANSCEIVER, Point
from fabricwatch.ingest.optics import ModuleReading, dbm_to_mw, optic_gauges

_LANE_SENSORS = {"input-power": "rx_mw", "output-power": "tx_mw", "laser-bias-current": "bias_ma"}
_THRESHOLDS = {
    "input-power-lower": ("rx_power_low", True),
    "output-power-lower": ("tx_power_low", True),
    "laser-bias-current-upper": ("bias_high", False),
    "module-temperature-upper": ("temperature_high", False),
}
"""Threshold leaf -> our threshold stem, and whether it is in dBm."""
_SEVERITY = {"CRITICAL": "alarm", "MAJOR": "alarm", "MINOR": "warning", "WARNING": "warning"}
MAX_AGE_NS = 300 * 1_000_000_000
"""A component not heard of for this long (a module pulled, a target that stopped sending its
optics) has no readings: unknown, never its last ones. A SAMPLE subscription repeats them at every
interval; ON_CHANGE ones should be subscribed with a heartbeat shorter than this."""


@dataclass
class _Component:
    lanes: dict[str, dict[str, float]] = field(default_factory=dict)
    temperature_c: float = math.nan
    thresholds: dict[str, float] = field(default_factory=dict)
    heard_ns: int = 0

    def reading(self) -> ModuleReading:
        order = sorted({i for by_lane in self.lanes.values() for i in by_lane}, key=_lane_order)

        def lanes(sensor: str) -> list[float]:  # one order for all three: lane i of each is one lane
            by_lane = self.lanes.get(sensor, {})
            return [by_lane.get(i, math.nan) for i in order]

        return ModuleReading(
            rx_mw=lanes("rx_mw"),
            tx_mw=lanes("tx_mw"),
            bias_ma=lanes("bias_ma"),
            temperature_c=self.temperature_c,
            thresholds=dict(self.thresholds),
        )


class DeviceOptics:
    def __init__(self) -> None:
        self._component_of: dict[str, str] = {}
        self._components: dict[str, _Component] = {}

    def take(self, point: Point, port: str | None) -> bool:
        """Keep an optics point (True: it is one, whatever it said); ``port``: the interface the
        point's keys name, for the transceiver reference."""
        if point.path == TRANSCEIVER:
            if port is not None and isinstance(point.value, str):
                self._component_of[port] = point.value
            return True
        if point.path not in OPTIC_LEAVES or isinstance(point.value, str):
            return False  # anything else under /components is no counter of ours: counted as such
        leaf = point.path.rsplit("/", 2)
        name = point.keys.get("component_name") or point.keys.get("name")
        if name is None:
            return True
        component = self._components.setdefault(name, _Component())
        if point.ts_ns < component.heard_ns:
            return True  # late: a newer reading is kept
        component.heard_ns = point.ts_ns
        value = float(point.value)
        if point.path.endswith("/state/temperature/instant"):
            component.temperature_c = value
        elif leaf[-1] == "instant" and leaf[-2] in _LANE_SENSORS:
            sensor = _LANE_SENSORS[leaf[-2]]
            lane = point.keys.get("channel_index") or point.keys.get("index") or "0"
            reading = dbm_to_mw(value) if sensor != "bias_ma" else value
            component.lanes.setdefault(sensor, {})[lane] = reading
        elif leaf[-1] in _THRESHOLDS:
            stem, dbm = _THRESHOLDS[leaf[-1]]
            severity = point.keys.get("threshold_severity") or point.keys.get("severity") or ""
            kind = _SEVERITY.get(severity.rpartition(":")[2].upper())
            if kind is not None:
                component.thresholds[f"{stem}_{kind}"] = dbm_to_mw(value) if dbm else value
        return True

    def gauges(self, port: str, ts_ns: int) -> dict[str, int]:
        """The port's optic gauges at ``ts_ns``: its transceiver's (by the interface's reference,
        or a component named as the port), nothing when neither is known or it has gone quiet."""
        component = self._components.get(self._component_of.get(port, port))
        if component is None or ts_ns - component.heard_ns > MAX_AGE_NS:
            return {}
        return optic_gauges(component.reading())


def _lane_order(lane: str) -> tuple[int, str]:
    return (int(lane), "") if lane.isdigit() else (1 << 30, lane)
