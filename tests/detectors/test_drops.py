"""Dropped packets by cause (``detectors/drops.py``): a lossless class that drops is critical at any
rate, a lossy one from its loss rate; one overflow is not systematic; drops a dead link or an
incast explains fire linked to it (``caused_by``) and are not paged on their own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import small_fabric
from helpers.paths import FIXTURES

from fabricwatch.detectors.config import DetectorConfig, load_config
from fabricwatch.detectors.drops import Drops, DropsConfig
from fabricwatch.detectors.evaluation import evaluate
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats
from fabricwatch.schemas import topics
from fabricwatch.schemas.config import ConfigError
from fabricwatch.schemas.messages import CounterSpec, Snapshot, encode

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def test_a_port_whose_headroom_is_too_small_is_one_critical_incident_and_one_overflow_is_none(tmp_path):
    faults = (
        "  - {kind: headroom_drops, device: leaf00, port: Ethernet8, drop_rate: 0.0001,"
        " start: 30.3, duration: 40}\n"
        "  - {kind: drop_burst, device: leaf01, port: Ethernet0, drop_rate: 0.001, start: 85.2,"
        " duration: 0.5}"
    )
    events = [a for a in small_fabric.replayed(tmp_path, "drops", faults, 11, 120) if a.kind == "packet_loss"]
    assert [(a.status, a.root.device, a.root.port) for a in events] == [
        ("firing", "leaf00", "Ethernet8"),
        ("resolved", "leaf00", "Ethernet8"),
    ]
    firing = events[0]
    assert (firing.ts_ns - T0) / NS - 30.3 <= 3.0  # (persist_polls + 1) polls
    assert firing.severity == "critical" and firing.evidence["cause"] == "lossless_class"
    assert 0.5e-4 < firing.evidence["peak_loss_ratio"] < 2e-4  # the injected 1e-4 of what it receives
    assert "PFC headroom" in firing.hint and not firing.caused_by


def test_drops_at_a_dead_link_fire_linked_to_it_and_are_not_scored_or_paged_alone(tmp_path):
    """The switch drops what is routed to a link that is down: systematic drops, whose cause is
    the link down incident (open first: it fires in one poll, drops need two)."""
    faults = "  - {kind: link_down, device: h005, start: 30.3, duration: 20}"
    events = small_fabric.replayed(tmp_path, "down", faults, 11, 90)
    (down,) = [a for a in events if a.kind == "link_down" and a.status == "firing"]
    losses = [a for a in events if a.kind == "packet_loss" and a.status == "firing"]
    assert losses and all(a.caused_by == down.fingerprint for a in losses)
    assert all(a.evidence["cause"] == "link_down" and "caused by the link down" in a.summary for a in losses)
    scored = evaluate(events, [], poll_s=1.0, duration_s=90)
    assert scored.false_alerts == 1  # the link down itself (no label given): its drops are its own


def test_a_lossy_class_drops_from_its_loss_rate_a_lossless_one_at_any_rate():
    detector = Drops(DropsConfig())
    fabric = FabricMap(None)
    specs = [CounterSpec("rx_packets", "counter", 64), CounterSpec("tx_packets", "counter", 64)]
    specs += [CounterSpec("queue_drops", "counter", 64, q) for q in (0, 3)]
    layout = Layout.of(tuple(specs))
    ports = ["Ethernet0", "Ethernet8", "Ethernet16"]
    #                    rx    tx    q0 drops  q3 drops
    rows = np.array([[1e6, 1e6, 0.5, 0.0], [1e6, 1e6, 1000.0, 0.0], [1e6, 1e6, 0.0, 2.0]])

    def poll(t: int) -> list:
        frame = RateFrame("leaf00", "switch", T0 + t * NS, 1.0, ports, layout, rows.copy())
        return detector.update(Poll(frame, np.full(3, 5e10), fabric))

    assert poll(1) == []
    said = {s.port: s.evidence for s in poll(2)}
    assert set(said) == {"Ethernet8", "Ethernet16"}  # 0.5 of 1e6 on a lossy queue is below min_loss_ratio
    assert said["Ethernet8"]["cause"] == "lossy_class" and said["Ethernet8"]["severity"] == "critical"
    assert said["Ethernet16"]["cause"] == "lossless_class" and said["Ethernet16"]["severity"] == "critical"
    assert said["Ethernet16"]["loss_ratio"] < 1e-5  # critical for its class, not its rate


def test_unknown_drop_rates_neither_clear_nor_extend_a_dropping_port():
    """A reset or a stale read makes a rate unknown (NaN): never a zero that heals a port."""
    detector = Drops(DropsConfig(clear_after_s=5.0, lack_of_data_s=20.0))
    fabric = FabricMap(None)
    layout = Layout.of((CounterSpec("rx_packets", "counter", 64), CounterSpec("rx_discards", "counter", 64)))

    def poll(t: int, dropped: float) -> list:
        values = np.array([[1e6, dropped]])
        frame = RateFrame("h001/mlx5_0", "nic", T0 + t * NS, 1.0, ["1"], layout, values)
        return detector.update(Poll(frame, np.full(1, 5e10), fabric))

    assert poll(1, 500.0) == [] and [s.active for s in poll(2, 500.0)] == [True]
    for t in range(3, 15):
        assert [s.active for s in poll(t, np.nan)] == [True], t
    (ended,) = [s for t in range(15, 30) for s in poll(t, np.nan) if not s.active]
    assert "no poll could read its drop counters" in str(ended.evidence["ended"])


def test_a_real_mlx5_reading_with_priority_0_discards_read_again_each_second_is_a_lossy_class():
    """The first reading is a real ConnectX-6 Dx ``ethtool -S`` (``tests/fixtures/SOURCES.md``):
    58.6 G discards since the driver loaded, on priority 0. The next readings are derived from it,
    labelled so (no second real reading exists): each adds a second of 1,000 discards on priority
    0 in a million packets received (1e-3, past critical_ratio). Priority 0 is not lossless: a
    lossy class dropping, said as such, through the collector's own names and the vendor map."""
    text = (FIXTURES / "ethtool_mlx5_cx6dx_k5.15_xdp_filtered.txt").read_text()
    real = parse_ethtool_stats(text).values
    assert real["rx_discards_phy"] == 58591428329 and real["rx_prio0_discards"] == 58591314012
    pipeline, events = Pipeline(DetectorConfig()), []
    for second in range(6):
        derived = dict(real)
        for name, step in (
            ("rx_packets_phy", 1_000_000),
            ("rx_discards_phy", 1000),
            ("rx_prio0_discards", 1000),
        ):
            derived[name] = real[name] + second * step
        specs, values = map_counters("mlx5_ethtool", derived)
        ts = T0 + second * NS
        snap = Snapshot("h001/mlx5_0", "nic", ts, specs, ["1"], [list(values)], source="mlx5_ethtool")
        events += pipeline.feed(topics.COUNTERS, ts, encode(snap))
    events += pipeline.finish()
    (firing,) = [a for a in events if a.kind == "packet_loss" and a.status == "firing"]
    assert (firing.root.device, firing.severity) == ("h001/mlx5_0", "critical")
    assert firing.evidence["cause"] == "lossy_class" and "1.0e-03 of packets" in firing.summary


def test_drops_config_names_the_file_the_key_and_a_priority_out_of_range(tmp_path: Path):
    path = tmp_path / "fabricwatch.yaml"
    path.write_text("detectors:\n  drops:\n    lossless_priorities: [3, 9]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert str(path) in text and "lossless_priorities" in text and "0 and 7" in text


@pytest.mark.parametrize("section", ["drops", "link_errors", "retransmissions"])
def test_a_streak_longer_than_its_window_is_a_config_error(tmp_path: Path, section: str):
    """persist_polls 4 of a 3-poll window could never be met: the detector would never fire."""
    path = tmp_path / "fabricwatch.yaml"
    path.write_text(f"detectors:\n  {section}:\n    persist_polls: 4\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert str(path) in text and section in text and "window_polls" in text
