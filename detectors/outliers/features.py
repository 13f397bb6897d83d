"""Features of a port for the learned outlier model: ratios, never load itself (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.rates import Layout, RateFrame

CLASSES = ("nic", "host_facing", "fabric")
NS = 1_000_000_000


@dataclass(frozen=True)
class Feature:
    """``counters`` (summed over priorities/queues) per ``per``, times ``unit``; with ``idle`` (``tx``
    or ``rx``) also times the share of the interval that direction neither carried traffic nor was
    paused; then log1p."""

    name: str
    counters: tuple[str, ...]
    per: str  # "rx_packets" | "tx_packets" | "line" (bytes/s of line rate) | "second"
    unit: float
    unit_name: str
    health: bool = False
    idle: str = ""


_PPM, _US_OF_LINE = 1e6, 1e6
_PAUSED_PCT = 1e-4  # microseconds paused per second -> percent of the time
_US = 1e-6  # microseconds paused per second -> share of the time
# Per direction: the bytes it carries and the pause that stops it (a peer pausing us stops our tx).
_DIRECTION = {"tx": ("tx_bytes", "rx_pfc_duration_us"), "rx": ("rx_bytes", "tx_pfc_duration_us")}


def _ppm(counter: str, per: str, health: bool = False, idle: str = "") -> Feature:
    name = f"{counter}/{per}" + (f"*idle_{idle}" if idle else "")
    return Feature(name, (counter,), per, _PPM, "ppm", health, idle)


def _per_s(counter: str, *more: str, health: bool = False) -> Feature:
    return Feature(counter, (counter, *more), "second", 1.0, "/s", health)


_PORT_FEATURES = (
    _ppm("rx_errors", "rx_packets", health=True),
    _ppm("tx_errors", "tx_packets", health=True),
    _per_s("symbol_errors", health=True),
    _per_s("link_error_recovery", "link_downed", health=True),
    Feature("paused_by_peer", ("rx_pfc_duration_us",), "second", _PAUSED_PCT, "%"),
    Feature("pausing_peer", ("tx_pfc_duration_us", "tx_pause_duration_us"), "second", _PAUSED_PCT, "%"),
    _per_s("rx_pfc_frames", "rx_pause_frames"),
    _per_s("tx_pfc_frames", "tx_pause_frames"),
)
FEATURES: dict[str, tuple[Feature, ...]] = {
    "nic": (
        *_PORT_FEATURES,
        _ppm("rx_discards", "rx_packets", health=True),  # a lossless NIC that drops cannot keep up
        _ppm("out_of_buffer", "rx_packets", health=True),
        _ppm("out_of_sequence", "rx_packets", health=True),
        _ppm("packet_seq_err", "tx_packets", health=True),
        _ppm("implied_nak_seq_err", "tx_packets", health=True),
        _ppm("local_ack_timeout_err", "tx_packets", health=True),
        _per_s("rnr_nak_retry_err", health=True),
        _ppm("rx_ecn_marked_packets", "rx_packets"),
        _ppm("rx_ecn_marked_packets", "rx_packets", idle="rx"),
        _ppm("cnp_sent", "rx_packets"),
        _ppm("cnp_received", "tx_packets"),
        _ppm("cnp_received", "tx_packets", idle="tx"),
        _per_s("tx_wait"),
        _per_s("rx_buffer_passed_thres"),
    ),
    "switch": (
        *_PORT_FEATURES,
        _ppm("rx_discards", "rx_packets"),
        _ppm("tx_discards", "tx_packets"),
        _ppm("queue_drops", "tx_packets"),
        _ppm("queue_ecn_marked_packets", "tx_packets"),
        Feature("queue_delay", ("queue_occupancy_bytes",), "line", _US_OF_LINE, "us"),
        Feature("queue_delay*idle_tx", ("queue_occupancy_bytes",), "line", _US_OF_LINE, "us", True, "tx"),
    ),
}
"""Per device kind. At a NIC, ECN while the line is idle is load-shaped, not health: a NIC behind a
congested fabric link receives marks at any rate. A counter a device does not report makes its
feature unknown (imputed with the baseline median); a feature unknown throughout the baseline is
left out of that class's model."""


@dataclass(frozen=True)
class _Plan:
    """A counter table's features as column gathers and sums, with no BLAS call: a matrix product
    would be shorter, but BLAS threads spinning after each call steal the core from stage 1.

    feature = log1p(floor(ratio * (1 - busy share of its direction))), where
    ratio = sum(numerator columns) * unit / (packet column + 1, or line rate, or 1 per second)."""

    num_cols: np.ndarray  # numerator columns of every feature, concatenated
    num_starts: np.ndarray  # where each feature's columns start in num_cols
    unit: np.ndarray
    per_line: np.ndarray  # 1 where divided by line rate
    floor: np.ndarray  # 1 elsewhere: one packet (or one second) keeps a ratio finite on an idle port
    packet_features: np.ndarray  # features divided by a packet count ...
    packet_cols: np.ndarray  # ... and that count's column
    carried_cols: np.ndarray  # tx_bytes, rx_bytes
    paused_cols: tuple[np.ndarray, np.ndarray]  # what stops tx, rx (microseconds per second)
    idle: np.ndarray  # per feature: 0, or 1 (tx) / 2 (rx) whose busy share weighs it
    absent: np.ndarray  # features this counter table cannot give


def _plan(layout: Layout, features: tuple[Feature, ...]) -> _Plan:
    columns: dict[str, list[int]] = {}
    for i, c in enumerate(layout.counters):
        columns.setdefault(c.name, []).append(i)
    num = [[i for name in f.counters for i in columns.get(name, ())] for f in features]
    packets = [j for j, f in enumerate(features) if f.per in columns]
    directions = list(_DIRECTION)
    absent = [
        not cols
        or (f.per.endswith("_packets") and f.per not in columns)
        or (f.idle != "" and _DIRECTION[f.idle][0] not in columns)
        for f, cols in zip(features, num, strict=True)
    ]
    return _Plan(
        num_cols=np.array([i for cols in num for i in cols or [0]], dtype=np.intp),
        num_starts=np.cumsum([0] + [len(cols) or 1 for cols in num[:-1]]).astype(np.intp),
        unit=np.array([f.unit for f in features]),
        per_line=np.array([f.per == "line" for f in features], dtype=np.float64),
        floor=np.array([f.per != "line" for f in features], dtype=np.float64),
        packet_features=np.array(packets, dtype=np.intp),
        packet_cols=np.array([columns[features[j].per][0] for j in packets], dtype=np.intp),
        carried_cols=np.array([columns.get(sent, [0])[0] for sent, _ in _DIRECTION.values()], dtype=np.intp),
        paused_cols=tuple(np.array(columns.get(stop, []), dtype=np.intp) for _, stop in _DIRECTION.values()),
        idle=np.array([directions.index(f.idle) + 1 if f.idle else 0 for f in features], dtype=np.intp),
        absent=np.array(absent, dtype=bool),
    )


class FeatureExtractor:
    """Features of many ports in a few array operations (no loop over counters or ports). An
    unknown rate (NaN) makes every feature that uses it unknown, by plain NaN arithmetic."""

    def __init__(self) -> None:
        self._plans: dict[int, tuple[Layout, _Plan]] = {}

    def __call__(self, layout: Layout, kind: str, values: np.ndarray, line_Bps: np.ndarray) -> np.ndarray:
        """``values``: rates of ports (rows) in ``layout``'s columns; ``line_Bps``: each row's line rate."""
        plan = self._plan_for(layout, kind)
        line = line_Bps[:, None]
        num = np.add.reduceat(values[:, plan.num_cols], plan.num_starts, axis=1)
        num *= plan.unit
        den = line * plan.per_line
        den += plan.floor
        den[:, plan.packet_features] += values[:, plan.packet_cols]
        busy = np.zeros((len(values), 3))
        busy[:, 1:] = values[:, plan.carried_cols] / line
        for k, cols in enumerate(plan.paused_cols):
            if cols.size:
                busy[:, k + 1] += values[:, cols].sum(axis=1) * _US
        np.clip(busy, 0.0, 1.0, out=busy)
        num /= den
        num *= 1.0 - busy[:, plan.idle]
        out = np.log1p(np.floor(num))
        out[:, plan.absent] = np.nan
        return out

    def _plan_for(self, layout: Layout, kind: str) -> _Plan:
        found = self._plans.get(id(layout))
        if found is None or found[0] is not layout:
            found = self._plans[id(layout)] = (layout, _plan(layout, FEATURES[kind]))
        return found[1]


def kind_of(frame: RateFrame) -> str:
    return "nic" if frame.device_kind == "nic" else "switch"


def port_classes(frame: RateFrame, host_facing: np.ndarray | None) -> np.ndarray:
    """Index into CLASSES of every port of the frame; a switch port is host-facing unless the
    topology says otherwise (FabricMap.host_facing's convention)."""
    if frame.device_kind == "nic":
        return np.zeros(len(frame.ports), dtype=np.int8)
    if host_facing is None:
        return np.ones(len(frame.ports), dtype=np.int8)
    return np.where(host_facing, 1, 2).astype(np.int8)
