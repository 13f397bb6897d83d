"""Switch polls built by hand for the detectors' tests: a switch whose ports' counters move as a test says,
a storm, an incast, an ECMP group."""

from __future__ import annotations

import copy

import numpy as np

from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.schemas.messages import (
    CounterSpec,
    Device,
    EcmpGroup,
    NicAttachment,
    QueueProfile,
    Snapshot,
    Topology,
)

T0 = 1_800_000_000_000_000_000

LINE_Bps = 400e9 / 8

COLS = [
    CounterSpec("tx_bytes"),
    CounterSpec("rx_bytes"),
    CounterSpec("rx_pfc_frames", index=3),
    CounterSpec("rx_pfc_duration_us", index=3),
    CounterSpec("tx_pfc_frames", index=3),
    CounterSpec("tx_pfc_duration_us", index=3),
    CounterSpec("queue_tx_bytes", index=3),
    CounterSpec("queue_ecn_marked_packets", index=3),
    CounterSpec("queue_drops", index=3),
    CounterSpec("queue_occupancy_bytes", kind="gauge", index=3),
    CounterSpec("queue_watermark_bytes", kind="watermark", index=3),
    CounterSpec("oper_down", kind="gauge"),
]

RATE_COLS = 9  # the first nine are counters; the last two are read as they are


class Switch:
    """Cumulative counters of one switch, advanced by per-second rates for each interval."""

    def __init__(self, device: str, ports: list[str]) -> None:
        self.device, self.ports = device, ports
        self.raw = np.full((len(ports), len(COLS)), 10**9, dtype=np.float64)
        self.ts = T0

    def poll(self, dt_s: float, **per_port: dict[str, float]) -> Snapshot:
        """``per_port[col_name] = {port: value}``: rates for counters, levels for gauges/watermarks."""
        rates = np.zeros_like(self.raw)
        for name, values in per_port.items():
            j = next(i for i, c in enumerate(COLS) if c.name == name)
            for port, v in values.items():
                rates[self.ports.index(port), j] = v
        self.raw[:, :RATE_COLS] += rates[:, :RATE_COLS] * dt_s
        self.raw[:, RATE_COLS:] = rates[:, RATE_COLS:]
        self.ts += int(dt_s * 1e9)
        return Snapshot(
            device=self.device,
            device_kind="switch",
            ts_ns=self.ts,
            counters=COLS,
            ports=self.ports,
            values=self.raw.astype(np.uint64).tolist(),
        )


def storm(port: str) -> dict:
    return {
        "rx_pfc_frames": {port: 20_000},
        "rx_pfc_duration_us": {port: 1e6},
        "queue_occupancy_bytes": {port: 2e6},
        "queue_watermark_bytes": {port: 2e6},
    }


def run(stage: Stage1, snaps: list[Snapshot]) -> list[list]:
    """Each poll's symptoms, one poll at a time as the in-process pipeline runs stage 1. The same
    polls in one batch, as a worker runs them (the detectors screening the batch's polls of a
    layout at once), must give the same."""
    batched = copy.deepcopy(stage)
    out = [stage.process(s)[1] for s in snaps]
    assert [symptoms for _, symptoms in batched.process_batch(snaps)] == out, "a batch differs"
    return out


def incast(port: str, feeders: list[str], watermark: float = 1.5e6) -> dict:
    return {
        "tx_bytes": {port: 0.98 * LINE_Bps},
        "queue_tx_bytes": {port: 0.98 * LINE_Bps},
        "rx_bytes": {f: 0.98 * LINE_Bps / len(feeders) * 1.5 for f in feeders},
        "queue_ecn_marked_packets": {port: 3e5},
        "queue_watermark_bytes": {port: watermark},
        "queue_occupancy_bytes": {port: watermark * 0.8},
    }


PORTS = [f"Ethernet{8 * i}" for i in range(6)]

SHALLOW = {"ecn_kmin_bytes": 51_200, "ecn_kmax_bytes": 409_600}
"""A shallow-buffer fabric's WRED band (50 KiB to 400 KiB), below the configured default's."""


def shallow_topology(*profiles: QueueProfile) -> Topology:
    """leaf0 with a host behind each of ``PORTS``, and these queue profiles."""
    hosts = [NicAttachment(f"h{i}", f"h{i}/mlx5_0", "1", "leaf0", port) for i, port in enumerate(PORTS)]
    return Topology(
        ts_ns=0, devices=[Device("leaf0", "leaf")], links=[], nics=hosts, queue_profiles=list(profiles)
    )


def ecmp_topology(uplinks: list[str]) -> Topology:
    return Topology(
        ts_ns=T0,
        devices=[Device("leaf0", "leaf")],
        links=[],
        ecmp_groups=[EcmpGroup("leaf0/uplinks", "leaf0", uplinks, "spines")],
    )
