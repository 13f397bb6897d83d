"""Optics out of range (issue 34, 5): a transceiver past its own alarm or warning thresholds is
one incident per link, rooted at the module at fault, from simulated faults and from real and
upstream readings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from helpers import small_fabric
from helpers.paths import FIXTURES

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.optics import Optics, OpticsConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll, PollStack
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.device import MODULE_SOURCE
from fabricwatch.ingest.nic.module import parse_module_info
from fabricwatch.ingest.optics import optic_gauges, sonic_reading
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, CounterSpec, Snapshot, encode

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str) -> list[Anomaly]:
    events = small_fabric.replayed(tmp_path, "optics", faults, 13, 240)
    return [a for a in events if a.kind == "optics_out_of_range"]


def test_a_failing_host_optic_is_one_critical_incident_at_the_nic_with_both_ends_readings(tmp_path):
    events = replayed(tmp_path, "  - {kind: failing_optic, device: h003, start: 30.3, duration: 60}")
    assert {(a.root.device, a.root.port) for a in events} == {("h003/mlx5_0", "1")}
    firing = events[0]
    cfg = DetectorConfig().optics
    assert firing.status == "firing" and events[-1].status == "resolved"
    assert (firing.ts_ns - T0) / NS - 30.3 <= (cfg.persist_polls + 1) * cfg.every_s + 2
    assert firing.severity == "critical"  # past its alarm thresholds, not only its warnings
    assert "h003/mlx5_0 1: transmitted power 0.05 mW below its low alarm threshold 0.2 mW" in firing.summary
    assert "laser bias 10.5 mA above its high alarm threshold 10 mA" in firing.summary
    assert "leaf00 Ethernet" in firing.summary and "received power" in firing.summary  # the far end
    assert firing.hint.startswith("Replace or reseat the optic at h003/mlx5_0 1") and firing.jobs == ["dp"]


def test_a_failing_spine_optic_is_rooted_at_the_spine_port_not_at_the_leaf_that_receives_little(tmp_path):
    events = replayed(
        tmp_path, "  - {kind: failing_optic, device: spine01, port: Ethernet0, start: 30.3, duration: 60}"
    )
    (firing,) = [a for a in events if a.status == "firing"]
    assert (firing.root.device, firing.root.port) == ("spine01", "Ethernet0")
    assert "likely its module" in firing.summary


def _check(detector: Optics, gauges: dict[str, int], t: int) -> list:
    specs = tuple(CounterSpec(name, "gauge", 64) for name in gauges)
    values = np.array([list(gauges.values())], dtype=float)
    frame = RateFrame("leaf-1", "switch", T0 + t * NS, 1.0, ["Ethernet8"], Layout.of(specs), values)
    return detector.update(Poll(frame, np.full(1, 5e10), FabricMap(None)))


def test_the_upstream_sonic_mock_module_past_its_bias_alarm_is_critical_and_says_by_how_much():
    """sonic-utilities' STATE_DB mock Ethernet8 (``tests/fixtures/SOURCES.md``): tx1bias 17.476 mA
    against a txbiashighalarm of 14.996 mA, and rx3power -22.9 dBm against a low alarm of -11.9."""
    mock = json.loads((FIXTURES / "sonic_state_db_transceiver_dom_upstream_mock.json").read_text())
    gauges = optic_gauges(
        sonic_reading(mock["TRANSCEIVER_DOM_SENSOR|Ethernet8"], mock["TRANSCEIVER_DOM_THRESHOLD|Ethernet8"])
    )
    detector = Optics(OpticsConfig(every_s=1.0))
    assert _check(detector, gauges, 0) == []
    (said,) = _check(detector, gauges, 1)
    assert (
        said.evidence["severity"] == "critical" and said.evidence["out_of_range_sensors"] == "rx_power bias"
    )
    assert said.evidence["out_of_range"] == (
        "received power 0.0051 mW below its low alarm threshold 0.0645 mW, "
        "laser bias 17.5 mA above its high alarm threshold 15 mA"
    )


def test_thresholds_a_module_leaves_unset_and_unknown_readings_judge_nothing():
    """A threshold of 0 is one the module leaves unset: a bias of 7 mA is not above a "high alarm"
    of 0, nor a transmit power unknown."""
    gauges = {"optic_bias_ua": 7000, "optic_bias_high_alarm_ua": 0, "optic_tx_power_low_alarm_nw": 200_000}
    detector = Optics(OpticsConfig(every_s=1.0))
    assert [s for t in range(4) for s in _check(detector, gauges, t)] == []


def test_a_sensor_gone_unreadable_does_not_clear_another_sensors_fault():
    """Received power past its alarm opens the symptom; then the reading goes missing while the
    temperature stays in range: unknown, not healed, until it ends for lack of data."""
    detector = Optics(OpticsConfig(every_s=1.0, clear_after_s=5.0, lack_of_data_s=30.0))
    weak = {"optic_rx_power_nw": 10_000, "optic_rx_power_low_alarm_nw": 44_600}
    temp = {"optic_temperature_mc": 45_000, "optic_temperature_high_alarm_mc": 75_000}
    both = weak | temp
    assert _check(detector, both, 0) == [] and _check(detector, both, 1)[0].active
    gone = {"optic_rx_power_low_alarm_nw": 44_600} | temp  # no rx reading
    said = [s for t in range(2, 20) for s in _check(detector, gone, t)]
    assert said and all(s.active for s in said)


def _screened(detector: Optics, gauges: dict[str, int], t: int) -> list:
    """A check as stage 1 makes it in a batch: the screen first (``spec.Screening``)."""
    specs = tuple(CounterSpec(name, "gauge", 64) for name in gauges)
    values = np.array([list(gauges.values())], dtype=float)
    frame = RateFrame("leaf-1", "switch", T0 + t * NS, 1.0, ["Ethernet8"], Layout.of(specs), values)
    poll = Poll(frame, np.full(1, 5e10), FabricMap(None))
    if detector.screen(PollStack.of([frame], [poll.line_Bps], poll.fabric))[0] and not detector.open(
        "leaf-1"
    ):
        detector.pass_over(poll)
        return []
    return detector.update(poll)


def test_a_sensor_read_in_range_only_by_screened_checks_still_holds_another_sensors_fault_open():
    """The screen passes over a healthy check only once each sensor it reads has been judged: the
    received power, read in range and then gone, must keep the temperature's fault from clearing
    as in ``test_a_sensor_gone_unreadable_does_not_clear_another_sensors_fault``."""
    detector = Optics(OpticsConfig(every_s=1.0, clear_after_s=5.0, lack_of_data_s=30.0))
    rx = {"optic_rx_power_nw": 400_000, "optic_rx_power_low_alarm_nw": 44_600}
    cool = {"optic_temperature_mc": 45_000, "optic_temperature_high_alarm_mc": 75_000}
    hot = {**cool, "optic_temperature_mc": 80_000}
    assert [s for t in range(3) for s in _screened(detector, rx | cool, t)] == []
    assert _screened(detector, hot, 3) == [] and _screened(detector, hot, 4)[0].active
    said = [s for t in range(5, 20) for s in _screened(detector, cool, t)]
    assert said and all(s.active for s in said)


def test_a_real_qsfp_dd_at_its_temperature_warning_is_a_warning_through_the_host_collectors_columns():
    """A real Arista QDD-400G-XDR4 ``ethtool -m`` (``tests/fixtures/SOURCES.md``): 70.49 degrees C
    against its own high warning threshold of 70 (the module itself raised its warning flag), its
    alarm at 75. Read as the host collector sends it (the ``ethtool_module`` columns), at three
    checks 10 s apart; the incident is a warning at the NIC, about its temperature."""
    reading = parse_module_info((FIXTURES / "ethtool_m_qsfpdd_400g_xdr4_netdev_2024.txt").read_text())
    specs, values = map_counters(MODULE_SOURCE, optic_gauges(reading))
    pipeline, events = Pipeline(DetectorConfig()), []
    for second in range(0, 31):
        ts = T0 + second * NS
        snap = Snapshot("h001/mlx5_0", "nic", ts, specs, ["1"], [list(values)], source=MODULE_SOURCE)
        events += pipeline.feed(topics.COUNTERS, ts, encode(snap))
    events += pipeline.finish()
    (firing,) = [a for a in events if a.status == "firing"]
    assert firing.kind == "optics_out_of_range" and firing.severity == "warning"
    assert "temperature 70.5 C above its high warning threshold 70 C" in firing.summary
    assert firing.root.device == "h001/mlx5_0"
