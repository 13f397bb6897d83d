"""The detectors' screens (issue 37, item 2): a worker's batch of switch (or NIC) polls of one
layout is read in one numpy pass per detector, and a poll that would start nothing skips the
detector's per-device pass. Under DCQCN every switch marks a little and pauses a little all day,
and NICs receive marks: those polls must pass the screen, or the worker pays for every one twice.
What a screen passes over is judged the same as one at a time (``test_stage1_batch.py``); here,
that it passes over the common poll and never the poll of a fault."""

from __future__ import annotations

import numpy as np
from helpers.switch_polls import PORTS, SHALLOW, T0, LINE_Bps, Switch, incast, shallow_topology, storm

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incast import IncastDetector
from fabricwatch.detectors.link_degrading import LinkDegrading
from fabricwatch.detectors.link_speed import LinkSpeed
from fabricwatch.detectors.link_state import LinkState
from fabricwatch.detectors.optics import Optics
from fabricwatch.detectors.pfc_storm import NicPauseStorm, PfcWatchdog, StalledEgress
from fabricwatch.detectors.rates import Layout, RateEngine, RateFrame
from fabricwatch.detectors.spec import Poll, PollStack
from fabricwatch.schemas.messages import CounterSpec, QueueProfile, Snapshot
from fabricwatch.schemas.topology import Device, Link, Topology

BUSY = {
    "tx_bytes": dict.fromkeys(PORTS, 0.3 * LINE_Bps),
    "queue_tx_bytes": dict.fromkeys(PORTS, 0.3 * LINE_Bps),
}
MARKING = {  # DCQCN at work: a few marks and pauses on every queue, queues shallow, links a third busy
    **BUSY,
    "queue_ecn_marked_packets": dict.fromkeys(PORTS, 1000.0),
    "rx_pfc_frames": dict.fromkeys(PORTS, 100.0),
    "tx_pfc_frames": dict.fromkeys(PORTS, 100.0),
    "queue_occupancy_bytes": dict.fromkeys(PORTS, 60e3),
    "queue_watermark_bytes": dict.fromkeys(PORTS, 100e3),
}
STALLED = {  # a full queue that sends nothing, unpaused, while its switch pauses its feeders
    **MARKING,
    "queue_occupancy_bytes": {**MARKING["queue_occupancy_bytes"], "Ethernet0": 2.2e6},
    "queue_watermark_bytes": {**MARKING["queue_watermark_bytes"], "Ethernet0": 2.2e6},
    "queue_tx_bytes": {**BUSY["queue_tx_bytes"], "Ethernet0": 0.0},
    "rx_pfc_frames": {**MARKING["rx_pfc_frames"], "Ethernet0": 0.0},
}


def stack(*polls: dict) -> PollStack:
    """One switch's polls after a first quiet one, each as a different switch of a batch would be."""
    fabric, frames = FabricMap(None), []
    for i, counters in enumerate(polls):
        engine, sw = RateEngine(), Switch(f"leaf{i}", PORTS)
        engine.update(sw.poll(1.0, **BUSY))
        frames.append(engine.update(sw.poll(1.0, **counters)))
    return PollStack.of(frames, [fabric.speeds(f.device, f.ports)[0] for f in frames], fabric)


def test_the_common_marking_and_pausing_poll_passes_every_screen():
    config = DetectorConfig()
    polls = stack(MARKING, MARKING, BUSY)
    assert IncastDetector(config.incast).screen(polls).tolist() == [True, True, True]
    assert PfcWatchdog(config.pfc_storm).screen(polls).tolist() == [True, True, True]
    assert StalledEgress(config.pfc_storm).screen(polls).tolist() == [True, True, True]


def test_a_poll_that_could_start_a_fault_is_judged_whoever_its_neighbours_in_the_stack():
    config = DetectorConfig()
    into = {**MARKING, **incast("Ethernet0", PORTS[1:5])}
    paused = {**MARKING, **storm("Ethernet8"), "queue_tx_bytes": {"Ethernet0": 0.3 * LINE_Bps}}
    polls = stack(MARKING, into, paused, STALLED)
    # A queue full to the brim reads as an incast's first poll to the screen, whatever fills it:
    # ``update`` then asks what only it can (its feeders, its streak).
    assert IncastDetector(config.incast).screen(polls).tolist() == [True, False, False, False]
    assert PfcWatchdog(config.pfc_storm).screen(polls).tolist() == [True, True, False, True]
    assert StalledEgress(config.pfc_storm).screen(polls).tolist() == [True, True, True, False]


def test_a_queue_deep_only_by_the_topology_s_shallow_profile_is_judged():
    """The incast screen's quick test takes the lowest Kmin any profile gives: a queue standing at
    100 KB on a port a third busy is below the configured band's Kmin (150 KB) and inside the
    shallow one (50 KiB) the topology gives the switch."""
    standing = {
        **MARKING,
        "queue_ecn_marked_packets": {**MARKING["queue_ecn_marked_packets"], "Ethernet0": 3e5},
        "queue_occupancy_bytes": {**MARKING["queue_occupancy_bytes"], "Ethernet0": 100e3},
        "queue_watermark_bytes": {**MARKING["queue_watermark_bytes"], "Ethernet0": 300e3},
    }
    polls = stack(standing)
    detector = IncastDetector(DetectorConfig().incast)
    assert detector.screen(polls).tolist() == [True]
    shallow = FabricMap(shallow_topology(QueueProfile("leaf0", **SHALLOW)))
    at_shallow = PollStack(polls.frames, polls.line_Bps, shallow, polls.layout, polls.values, polls.dt_s)
    assert detector.screen(at_shallow).tolist() == [False]


def nic_stack(*polls: dict[str, float]) -> PollStack:
    """NICs' second polls, each a second after a first with every counter at zero."""
    counters = [
        CounterSpec("rx_ecn_marked_packets"),
        CounterSpec("tx_pfc_duration_us", index=3),
        CounterSpec("pause_storm_warning_events"),
    ]
    fabric, frames = FabricMap(None), []
    for i, rates in enumerate(polls):
        engine = RateEngine()
        for t in (0, 1):
            values = [[int(rates.get(c.name, 0) * t) for c in counters]]
            snap = Snapshot(f"h{i}/mlx5_0", "nic", T0 + t * 10**9, counters, ["1"], values)
            frame = engine.update(snap)
        frames.append(frame)
    return PollStack.of(frames, [fabric.speeds(f.device, f.ports)[0] for f in frames], fabric)


def test_a_nic_that_marks_passes_the_pause_storm_screen_and_one_that_pauses_or_warns_does_not():
    polls = nic_stack(
        {"rx_ecn_marked_packets": 5000},
        {"rx_ecn_marked_packets": 5000, "tx_pfc_duration_us": 300_000},
        {"tx_pfc_duration_us": 995_000},
        {"tx_pfc_duration_us": 300_000, "pause_storm_warning_events": 1},
    )
    assert NicPauseStorm(DetectorConfig().pfc_storm).screen(polls).tolist() == [True, True, False, False]


def test_a_marking_nic_with_its_link_up_passes_the_link_state_screen_and_a_down_or_flapping_one_does_not():
    counters = [
        CounterSpec("rx_ecn_marked_packets"),
        CounterSpec("oper_down", kind="gauge"),
        CounterSpec("carrier_changes"),
    ]
    frames = []
    for i, (down, changes) in enumerate([(0, 0), (0, 0), (1, 0), (0, 2)]):
        engine = RateEngine()
        for t in (0, 1):
            values = [[5000 * t, down * t, changes * t]]
            frame = engine.update(Snapshot(f"h{i}/mlx5_0", "nic", T0 + t * 10**9, counters, ["1"], values))
        frames.append(frame)
    polls = PollStack.of(frames, [np.full(1, LINE_Bps)] * len(frames), FabricMap(None))
    assert LinkState(DetectorConfig().link_state).screen(polls).tolist() == [True, True, False, False]


def test_a_switch_that_cannot_show_a_stall_passes_the_stall_screen_whole():
    """Without its queues' sent bytes no stall can be read (``update`` says nothing): every poll
    passes, the full queue's too, and the answer has one entry per poll of the stack."""
    polls = stack(MARKING, STALLED, MARKING)
    keep = [i for i, c in enumerate(polls.layout.counters) if c.name != "queue_tx_bytes"]
    layout = Layout.of(tuple(polls.layout.counters[i] for i in keep))
    frames = [
        RateFrame(f.device, f.device_kind, f.ts_ns, f.dt_s, f.ports, layout, f.values[:, keep])
        for f in polls.frames
    ]
    without = PollStack.of(frames, list(polls.line_Bps), polls.fabric)
    assert StalledEgress(DetectorConfig().pfc_storm).screen(without).tolist() == [True, True, True]


def test_a_healthy_link_s_due_check_passes_the_paced_screens_and_a_slow_degrading_or_hot_one_does_not():
    """The paced checks (speed, FEC, optics) are screened too: every due check of a healthy link
    reads a speed, corrected bits and a temperature that are never zero, and must pass. Ethernet0
    of a 400G leaf: healthy; at half speed; correcting 2e-5 of its bits; its module past its alarm."""
    ports = ["Ethernet0"]
    topology = Topology(
        ts_ns=T0,
        devices=[Device("leaf00", "leaf"), Device("spine00", "spine")],
        links=[Link("leaf00", "Ethernet0", "spine00", "Ethernet0", 400.0)],
    )
    layout = Layout.of(
        (
            CounterSpec("link_speed_mbps", "gauge", 64),
            CounterSpec("fec_corrected_bits", "counter", 64),
            CounterSpec("optic_temperature_mc", "gauge", 64),
            CounterSpec("optic_temperature_high_alarm_mc", "gauge", 64),
        )
    )
    healthy = [400_000, 1_000, 45_000, 75_000]
    checks = [
        healthy,
        [200_000, *healthy[1:]],
        [400_000, 8e6, 45_000, 75_000],
        [*healthy[:2], 80_000, 75_000],
    ]
    frames = [
        RateFrame("leaf00", "switch", T0 + t * 10**10, 10.0, ports, layout, np.array([row], dtype=float))
        for t, row in enumerate(checks)
    ]
    fabric = FabricMap(topology)
    polls = PollStack.of(frames, [fabric.speeds("leaf00", ports)[0]] * len(frames), fabric)
    config = DetectorConfig()
    optics = Optics(config.optics)
    optics.update(Poll(frames[0], polls.line_Bps[0], fabric))  # the first check judges its sensors
    assert LinkSpeed(config.link_speed).screen(polls).tolist() == [True, False, True, True]
    assert LinkDegrading(config.fec_degrading).screen(polls).tolist() == [True, True, False, True]
    assert optics.screen(polls).tolist() == [True, True, True, False]
