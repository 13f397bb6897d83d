"""A transceiver's digital diagnostics (DOM) as the vocabulary's ``optic_*`` gauges, whatever read
them: ``ethtool -m`` on a host (``nic/module.py``), SONiC's STATE_DB on a switch (``sonic/phy.py``).

A module reports per lane (4 or 8): received and transmitted power, laser bias; and its
temperature, with its own alarm and warning thresholds for each. The detector needs one number per
sensor per port, the one nearest its threshold: the weakest lit lane's power, the highest lane's
bias. A lane counts when it is in use, biased or receiving: a 400G-XDR4 module in an 8-lane cage
reads 0 mW on lanes 5 to 8 by design, not as a dead fibre. Powers go out in nW and bias in uA (gauges are
unsigned integers: dBm is negative, 1 uW is too coarse near -30 dBm); a threshold the module
leaves at zero (some leave their transmit power thresholds empty) is left out: unknown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

THRESHOLDS = (
    "rx_power_low_alarm",
    "rx_power_low_warning",
    "tx_power_low_alarm",
    "tx_power_low_warning",
    "bias_high_alarm",
    "bias_high_warning",
    "temperature_high_alarm",
    "temperature_high_warning",
)
"""The thresholds read, in the units of their sensor (mW, mA, degrees C); the direction that
fails: a weak signal, a laser drawing ever more current, a hot module."""

DARK_MW = 0.001
"""-30 dBm: light below it is no signal (below any receiver's loss-of-signal level); a lane that
receives no more is dark, and not in use unless its own laser is biased."""

GAUGES = (
    "optic_rx_power_nw",
    "optic_tx_power_nw",
    "optic_bias_ua",
    "optic_temperature_mc",
    "optic_rx_power_low_alarm_nw",
    "optic_rx_power_low_warning_nw",
    "optic_tx_power_low_alarm_nw",
    "optic_tx_power_low_warning_nw",
    "optic_bias_high_alarm_ua",
    "optic_bias_high_warning_ua",
    "optic_temperature_high_alarm_mc",
    "optic_temperature_high_warning_mc",
)
"""Every gauge ``optic_gauges`` may give, in a fixed order (a collector's columns)."""

_UNITS = {
    "rx_power": ("_nw", 1e6),
    "tx_power": ("_nw", 1e6),
    "bias": ("_ua", 1e3),
    "temperature": ("_mc", 1e3),
}


@dataclass
class ModuleReading:
    """One module's diagnostics; NaN (or absent) where it does not say."""

    rx_mw: Sequence[float] = ()
    tx_mw: Sequence[float] = ()
    bias_ma: Sequence[float] = ()
    temperature_c: float = math.nan
    thresholds: dict[str, float] = field(default_factory=dict)
    """``THRESHOLDS`` name -> value in its sensor's unit."""


def dbm_to_mw(dbm: float) -> float:
    """-inf dBm (a dark lane) is 0 mW."""
    return 10.0 ** (dbm / 10.0)


def optic_gauges(reading: ModuleReading) -> dict[str, int]:
    """The ``optic_*`` gauges of one module: what it says, nothing for what it does not."""
    lit = _lit_lanes(reading)
    values = {
        "rx_power": _pick(reading.rx_mw, lit, min),
        "tx_power": _pick(reading.tx_mw, lit, min),
        "bias": _pick(reading.bias_ma, None, max),
        "temperature": reading.temperature_c,
    }
    out: dict[str, int] = {}
    for sensor, value in values.items():
        _put(out, f"optic_{sensor}", sensor, value)
    for name in THRESHOLDS:
        sensor = name.rsplit("_", 2)[0]
        limit = reading.thresholds.get(name, math.nan)
        if limit > 0:  # zero: the module leaves it unset
            _put(out, f"optic_{name}", sensor, limit)
    return out


def _lit_lanes(reading: ModuleReading) -> set[int] | None:
    """Lanes in use: biased, or receiving light (a lane whose own laser died still receives from
    the far end, and its 0 mW is the fault); None (every lane that reports) when no bias is known.
    A lane neither biased nor receiving is one the module does not use (a 400G-XDR4 in an 8-lane
    cage); a module dark on every lane is a link down, the link state detector's."""
    known = [i for i, b in enumerate(reading.bias_ma) if math.isfinite(b)]
    if not known:
        return None
    receiving = {i for i, rx in enumerate(reading.rx_mw) if rx >= DARK_MW}
    return {i for i in known if reading.bias_ma[i] > 0} | receiving


def _pick(lanes: Sequence[float], lit: set[int] | None, worst: type[min] | type[max]) -> float:
    chosen = [v for i, v in enumerate(lanes) if math.isfinite(v) and (lit is None or i in lit)]
    return worst(chosen) if chosen else math.nan  # type: ignore[operator]


def _put(out: dict[str, int], stem: str, sensor: str, value: float) -> None:
    suffix, scale = _UNITS[sensor]
    if math.isfinite(value) and value >= 0:
        out[stem + suffix] = round(value * scale)


def sonic_reading(sensor: Mapping[str, str], threshold: Mapping[str, str]) -> ModuleReading:
    """From SONiC STATE_DB's ``TRANSCEIVER_DOM_SENSOR|<port>`` and ``TRANSCEIVER_DOM_THRESHOLD|<port>``
    hashes (xcvrd writes them; powers in dBm, bias in mA, temperature in degrees C, "N/A" where
    the module has none)."""
    lanes = range(1, 9)  # kept in place, NaN where absent: lane i of each list is one lane
    return ModuleReading(
        rx_mw=[dbm_to_mw(_number(sensor.get(f"rx{n}power"))) for n in lanes],
        tx_mw=[dbm_to_mw(_number(sensor.get(f"tx{n}power"))) for n in lanes],
        bias_ma=[_number(sensor.get(f"tx{n}bias")) for n in lanes],
        temperature_c=_number(sensor.get("temperature")),
        thresholds={
            name: value
            for name, key, dbm in _SONIC_THRESHOLDS
            if not math.isnan(value := _dbm_or_plain(_number(threshold.get(key)), dbm))
        },
    )


_SONIC_THRESHOLDS = (
    ("rx_power_low_alarm", "rxpowerlowalarm", True),
    ("rx_power_low_warning", "rxpowerlowwarning", True),
    ("tx_power_low_alarm", "txpowerlowalarm", True),
    ("tx_power_low_warning", "txpowerlowwarning", True),
    ("bias_high_alarm", "txbiashighalarm", False),
    ("bias_high_warning", "txbiashighwarning", False),
    ("temperature_high_alarm", "temphighalarm", False),
    ("temperature_high_warning", "temphighwarning", False),
)


def _dbm_or_plain(value: float, dbm: bool) -> float:
    return dbm_to_mw(value) if dbm and not math.isnan(value) else value


def _number(text: str | bytes | None) -> float:
    """A hash field as a float; NaN for "N/A", absent or garbled ones."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    try:
        return float(text) if text is not None else math.nan
    except ValueError:
        return math.nan
