"""A NIC port's transceiver diagnostics from ``ethtool -m <netdev>`` (the module EEPROM, decoded
by ethtool for SFP, QSFP/QSFP28 and CMIS QSFP-DD/OSFP modules alike): the readings and thresholds
``optics.optic_gauges`` turns into gauges.

Lines are matched by label, never by position: the flag block's order differs between the
SFF-8636 and CMIS decoders, and the receive power line is ``Rcvr signal avg optical
power(Channel 1)`` on a QSFP28 (no space), ``... power (Channel 1)`` on CMIS, ``Receiver signal
OMA(Channel 1)`` on a module that reports OMA, and ``Receiver signal average optical power`` on an
SFP (one lane). Reading a module's EEPROM crosses an I2C bus (tens to hundreds of ms), and a module
updates its diagnostics about once a second: the collector reads it once a minute (``poll.py``).
"""

from __future__ import annotations

import math
import re

from fabricwatch.ingest.nic.device import ETHTOOL_TIMEOUT_S, EthtoolError
from fabricwatch.ingest.optics import ModuleReading
from fabricwatch.ingest.tools import run_tool

_LINE = re.compile(
    r"^\s*(?P<label>[^:]+?)\s*:\s*(?P<value>-?(?:\d+(?:\.\d*)?|inf))\s*(?P<unit>mW|mA|degrees C)"
)
_LANE = re.compile(r"\((?:Channel|Chan) (\d+)\)")
_LANES = {
    "bias_ma": ("Laser tx bias current", "Laser bias current"),
    "tx_mw": ("Transmit avg optical power", "Laser output power"),
    "rx_mw": (
        "Rcvr signal avg optical power",
        "Receiver signal OMA",
        "Receiver signal average optical power",
    ),
}
_THRESHOLDS = {
    "Laser rx power low alarm threshold": "rx_power_low_alarm",
    "Laser rx power low warning threshold": "rx_power_low_warning",
    "Laser output power low alarm threshold": "tx_power_low_alarm",
    "Laser output power low warning threshold": "tx_power_low_warning",
    "Laser bias current high alarm threshold": "bias_high_alarm",
    "Laser bias current high warning threshold": "bias_high_warning",
    "Module temperature high alarm threshold": "temperature_high_alarm",
    "Module temperature high warning threshold": "temperature_high_warning",
}


def parse_module_info(text: str) -> ModuleReading:
    """The diagnostics in ``ethtool -m`` output; a module without them (a copper cable, a module
    whose EEPROM has no DOM page) gives an empty reading."""
    lanes: dict[str, dict[int, float]] = {key: {} for key in _LANES}
    reading = ModuleReading()
    for line in text.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        label, value = found["label"], float(found["value"])
        lane = _LANE.search(label)
        stem = _LANE.sub("", label).strip()
        if stem in _THRESHOLDS:
            reading.thresholds[_THRESHOLDS[stem]] = value
        elif stem == "Module temperature":
            reading.temperature_c = value
        else:
            key = next((k for k, stems in _LANES.items() if stem in stems), None)
            if key is not None:
                lanes[key][int(lane.group(1)) if lane else 1] = value
    for key, by_lane in lanes.items():
        top = max(by_lane, default=0)
        setattr(reading, key, [by_lane.get(n, math.nan) for n in range(1, top + 1)])
    return reading


def read_module(netdev: str) -> ModuleReading:
    """``ethtool -m <netdev>``, parsed; raises EthtoolError when ethtool is absent or fails (a port
    with no module, or a driver that cannot read its EEPROM)."""
    text = run_tool(
        ["ethtool", "-m", netdev],
        f"ethtool -m {netdev}",
        ETHTOOL_TIMEOUT_S,
        "ethtool is not installed or not on PATH; install it (apt install ethtool) to read the "
        "transceiver's diagnostics, or collect with module_every_s: 0",
        EthtoolError,
    )
    return parse_module_info(text)
