"""A transceiver's diagnostics from ``ethtool -m`` (issue 34, 5): read by label whatever the
module's format, the weakest lit lane and the highest bias, the module's own thresholds; read
once a minute, and a failed read is unknown, never the last value."""

from __future__ import annotations

import time

import pytest
from helpers.paths import FIXTURES

from fabricwatch.ingest.nic.device import EthtoolError
from fabricwatch.ingest.nic.module import parse_module_info
from fabricwatch.ingest.nic.poll import CollectStats, Modules, NicTarget, ProblemLog
from fabricwatch.ingest.optics import ModuleReading, optic_gauges


def test_a_real_qsfp_dd_reading_gives_its_weakest_lit_lane_and_its_own_thresholds():
    """Arista QDD-400G-XDR4 (``tests/fixtures/SOURCES.md``): 4 lanes lit of 8. Lanes 5 to 8 read
    0 mW (-inf dBm) with no bias: unlit by design, not a dead fibre."""
    reading = parse_module_info((FIXTURES / "ethtool_m_qsfpdd_400g_xdr4_netdev_2024.txt").read_text())
    assert reading.bias_ma == [83.806, 81.878, 72.9, 110.1, 0.0, 0.0, 0.0, 0.0]
    assert reading.temperature_c == 70.49
    assert optic_gauges(reading) == {
        "optic_rx_power_nw": 1_821_500,  # lane 4's 1.8215 mW
        "optic_tx_power_nw": 1_438_700,  # lane 4's 1.4387 mW
        "optic_bias_ua": 110_100,
        "optic_temperature_mc": 70_490,
        "optic_rx_power_low_alarm_nw": 128_800,
        "optic_rx_power_low_warning_nw": 204_200,
        "optic_tx_power_low_alarm_nw": 407_400,
        "optic_tx_power_low_warning_nw": 512_900,
        "optic_bias_high_alarm_ua": 130_000,
        "optic_bias_high_warning_ua": 125_000,
        "optic_temperature_high_alarm_mc": 75_000,
        "optic_temperature_high_warning_mc": 70_000,
    }


SFF8636_LINES = """\
Module temperature                        : 42.17 degrees C / 107.90 degrees F
Laser tx bias current (Channel 1)         : 6.662 mA
Transmit avg optical power (Channel 1)    : 0.7119 mW / -1.48 dBm
Rcvr signal avg optical power(Channel 1)  : 0.7682 mW / -1.15 dBm
Laser output power low alarm threshold    : 0.0000 mW / -inf dBm
Laser rx power low alarm threshold        : 0.0446 mW / -13.51 dBm
"""
"""Lines in the format of a QSFP28 (SFF-8636) module as ethtool prints them (generated after the
netdev thread's QSFP+ output, ``tests/fixtures/SOURCES.md``): no space before ``(Channel``, and
transmit power thresholds the module leaves empty."""


def test_the_sff8636_forms_are_read_and_an_empty_threshold_is_unknown():
    gauges = optic_gauges(parse_module_info(SFF8636_LINES))
    assert gauges["optic_rx_power_nw"] == 768_200 and gauges["optic_rx_power_low_alarm_nw"] == 44_600
    assert "optic_tx_power_low_alarm_nw" not in gauges  # 0 mW: unset, not a threshold of zero
    sfp = (
        "Laser bias current                        : 6.000 mA\n"
        "Receiver signal average optical power     : 0.5000 mW / -3.01 dBm\n"
    )
    assert optic_gauges(parse_module_info(sfp)) == {"optic_rx_power_nw": 500_000, "optic_bias_ua": 6_000}
    assert optic_gauges(parse_module_info("Identifier : 0x11 (QSFP28)\n")) == {}  # a cable: no DOM


def test_modules_are_read_once_a_minute_one_per_poll_and_a_failed_read_is_unknown_said_once():
    reads: list[str] = []
    failing = [False]

    def read(netdev: str) -> ModuleReading:
        reads.append(netdev)
        if failing[0]:
            raise EthtoolError("Cannot get Module EEPROM data: Input/output error")
        return ModuleReading(rx_mw=[0.5], bias_ma=[6.0])

    said: list[str] = []
    modules = Modules(read, 0.2, ProblemLog(CollectStats(), said.append))
    a, b = NicTarget("mlx5_0", "eth0"), NicTarget("mlx5_1", "eth1")
    good = {"optic_rx_power_nw": 500_000, "optic_bias_ua": 6_000}
    modules.new_poll()
    assert modules.gauges(a) == good and modules.gauges(b) is None  # one EEPROM read a poll
    modules.new_poll()
    assert modules.gauges(a) == good and modules.gauges(b) == good  # a repeats its reading
    assert reads == ["eth0", "eth1"]
    failing[0] = True
    for _ in range(2):  # past every_s each time: read again, fail again, said once
        time.sleep(0.25)
        modules.new_poll()
        assert modules.gauges(a) is None
    assert reads == ["eth0", "eth1", "eth0", "eth0"]
    assert len(said) == 1 and "ethtool -m eth0" in said[0]
    failing[0] = False
    time.sleep(0.25)
    modules.new_poll()
    assert modules.gauges(a) == good and len(said) == 2 and "read again" in said[1]
    assert Modules(None, 60, ProblemLog(CollectStats(), said.append)).gauges(a) is None


def test_a_collector_told_never_reads_no_module():
    modules = Modules(lambda n: pytest.fail("read"), 0.0, ProblemLog(CollectStats(), print))
    assert modules.gauges(NicTarget("mlx5_0", "eth0")) is None
