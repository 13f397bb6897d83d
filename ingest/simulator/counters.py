"""Counter tables and raw counter values: what a NIC or switch would report, offsets, wraps and resets.

A device kind has one counter table (built once, shared by every snapshot), and all devices of a kind
share one matrix of rows (a port each): rates from the congestion model are written into a rate
matrix with a handful of fancy-indexed column assignments, integrated per segment, and turned into
raw values (random start offset, width wrap) for every port at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from fabricwatch.ingest.simulator.congestion import FabricState
from fabricwatch.ingest.simulator.fabric import Fabric
from fabricwatch.schemas.messages import CounterSpec
from fabricwatch.schemas.vocabulary import canonical

PRIORITIES = range(8)
WIDE_START = 2**40  # a 64-bit counter after weeks of uptime
NEAR_WRAP = {32: 2**10, 64: 2**36}  # ``near_wrap`` start: this far below the wrap
QUEUE = 3  # the lossless queue all RoCE traffic uses

_PFC = ("rx_pfc_frames", "tx_pfc_frames", "rx_pfc_duration_us", "tx_pfc_duration_us")
_NIC_32BIT = (
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "pcie_stall_read_seconds",
    "pcie_stall_write_seconds",
)
_LINK = ("carrier_changes", "link_downed", "oper_down")
_ADDED = ("pg_drops",)
"""Columns added after the link-state ones, drawn from the link columns' generator after them."""
OPTIC_THRESHOLDS = {
    "optic_rx_power_low_alarm_nw": 44_600,  # -13.5 dBm: the thresholds of sonic-utilities' mock
    "optic_rx_power_low_warning_nw": 112_200,  # module (TRANSCEIVER_DOM_THRESHOLD|Ethernet0)
    "optic_tx_power_low_alarm_nw": 200_000,
    "optic_tx_power_low_warning_nw": 300_000,
    "optic_bias_high_alarm_ua": 10_000,
    "optic_bias_high_warning_ua": 9_500,
    "optic_temperature_high_alarm_mc": 75_000,
    "optic_temperature_high_warning_mc": 70_000,
}
FIBRE_LOSS = 0.8  # about 1 dB between a transmitter and the far end's receiver
MODULE_TEMPERATURE_MC = 45_000
_PHY = (
    "fec_corrected_bits",
    "link_speed_mbps",
    "optic_rx_power_nw",
    "optic_tx_power_nw",
    "optic_bias_ua",
    "optic_temperature_mc",
    *OPTIC_THRESHOLDS,
)
"""Added after those, and drawn after them: what the physical layer says of a link's health."""
PHY_GAUGES = tuple(name for name in _PHY if name != "fec_corrected_bits")
"""Gauges a poll reads from the fabric's state as it is (``run.py``)."""
_PCIE = ("pcie_stall_read_seconds", "pcie_stall_write_seconds")
_STATE = ("admin_down",)
"""Added last, drawn last: a port taken down on purpose (a gauge, 1 while down on purpose)."""
NIC_COUNTERS = (
    ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "rx_discards", "rx_errors", "symbol_errors"),
    _LINK,
    _PFC,
    ("rx_ecn_marked_packets", "cnp_sent", "cnp_received", *_NIC_32BIT),
    ("pause_storm_warning_events", "pause_storm_error_events"),
    _PHY,
    _PCIE,
    _STATE,
)
SWITCH_COUNTERS = (
    (
        "tx_bytes",
        "rx_bytes",
        "tx_packets",
        "rx_packets",
        "rx_discards",
        "tx_discards",
        "rx_errors",
        "symbol_errors",
    ),
    _LINK,
    _PFC,
    ("queue_tx_bytes", "queue_tx_packets", "queue_drops", "queue_ecn_marked_packets"),
    ("queue_occupancy_bytes", "queue_watermark_bytes"),
    _ADDED,
    _PHY,
    _STATE,
)
# Columns that follow traffic leaving (tx) or entering (rx) the port: they share that link's noise.
_TX_NOISY = {
    "tx_bytes",
    "tx_packets",
    "tx_discards",
    "cnp_received",
    "packet_seq_err",
    "local_ack_timeout_err",
}
_TX_NOISY |= {"queue_tx_bytes", "queue_tx_packets", "queue_drops", "queue_ecn_marked_packets"}
_RX_NOISY = {"rx_bytes", "rx_packets", "rx_ecn_marked_packets", "cnp_sent", "out_of_sequence"}
_RX_NOISY |= {"rx_errors", "symbol_errors"}


class Table:
    """A device kind's counter columns and the column masks the value pipeline needs."""

    def __init__(self, groups: tuple[tuple[str, ...], ...]) -> None:
        vocab = canonical()
        specs = []
        for names in groups:
            for name in names:
                d = vocab[name]  # KeyError here means a name outside the canonical vocabulary
                width = 32 if name in _NIC_32BIT else 64
                indexes = PRIORITIES if d.scope != "port" else (None,)
                # Interned, because msgspec omits a default only when it is the same object.
                kind = sys.intern(d.kind)
                specs += [CounterSpec(name, kind, width, i) for i in indexes]  # type: ignore[arg-type]
        self.specs = specs
        self.columns = {(s.name, s.index): c for c, s in enumerate(specs)}
        self.counter = np.array([s.kind == "counter" for s in specs])
        self.mask32 = np.array([s.width == 32 for s in specs])
        self.tx_noisy = np.array([s.name in _TX_NOISY for s in specs], dtype=float)
        self.rx_noisy = np.array([s.name in _RX_NOISY for s in specs], dtype=float)

    def col(self, name: str, index: int | None = None) -> int:
        return self.columns[(name, index)]


NIC_TABLE = Table(NIC_COUNTERS)
SWITCH_TABLE = Table(SWITCH_COUNTERS)


@dataclass(frozen=True)
class Rates:
    """Per-second counter rates of one fabric state, laid out as the NIC and switch-port matrices."""

    nic: np.ndarray
    switch: np.ndarray
    queue: np.ndarray  # queue-3 occupancy per switch port (bytes)
    util: np.ndarray  # per directed link, to keep noise from pushing a full link past line rate


def rates(fabric: Fabric, st: FabricState) -> Rates:
    """Map a solved fabric state onto counter columns (no loop over devices)."""
    nic = np.zeros((fabric.n_nics, len(NIC_TABLE.specs)))
    _fill_port(nic, NIC_TABLE, st, fabric.nic_up, fabric.nic_down)
    t = NIC_TABLE
    nic[:, t.col("rx_ecn_marked_packets")] = st.nic_ecn
    nic[:, t.col("cnp_sent")] = st.nic_cnp_sent
    nic[:, t.col("cnp_received")] = st.nic_cnp_received
    nic[:, t.col("out_of_sequence")] = st.nic_oos
    nic[:, t.col("packet_seq_err")] = st.nic_seq_err
    nic[:, t.col("local_ack_timeout_err")] = st.nic_ack_timeout
    nic[:, t.col("pcie_stall_read_seconds")] = st.nic_pcie_stalled
    nic[:, t.col("pcie_stall_write_seconds")] = st.nic_pcie_stalled

    out, inn = fabric.port_out[fabric.n_nics :], fabric.port_in[fabric.n_nics :]
    sw = np.zeros((len(out), len(SWITCH_TABLE.specs)))
    _fill_port(sw, SWITCH_TABLE, st, out, inn)
    t = SWITCH_TABLE
    sw[:, t.col("tx_discards")] = st.drops[out]
    sw[:, t.col("queue_tx_bytes", QUEUE)] = st.bps[out]
    sw[:, t.col("queue_tx_packets", QUEUE)] = st.pps[out]
    sw[:, t.col("queue_drops", QUEUE)] = st.drops[out]
    sw[:, t.col("queue_ecn_marked_packets", QUEUE)] = st.marks[out]
    sw[:, t.col("pg_drops", QUEUE)] = st.ingress_drops[inn]
    sw[:, t.col("rx_discards")] = st.ingress_drops[inn]  # SAI's IF_IN_DISCARDS counts PG drops too
    return Rates(nic, sw, st.queue[out], st.util)


def _fill_port(m: np.ndarray, t: Table, st: FabricState, out: np.ndarray, inn: np.ndarray) -> None:
    """Columns every port has: traffic both ways, PFC both ways on the lossless priority, errors."""
    m[:, t.col("tx_bytes")] = st.bps[out]
    m[:, t.col("rx_bytes")] = st.bps[inn]
    m[:, t.col("tx_packets")] = st.pps[out]
    m[:, t.col("rx_packets")] = st.pps[inn]
    m[:, t.col("rx_errors")] = st.errors[inn]
    m[:, t.col("symbol_errors")] = st.symbols[inn]
    m[:, t.col("fec_corrected_bits")] = st.corrected_bits[inn]
    m[:, t.col("link_speed_mbps")] = st.speed_bps[inn] / 1e6
    m[:, t.col("optic_tx_power_nw")] = st.tx_mw[out] * 1e6
    m[:, t.col("optic_bias_ua")] = st.bias_ma[out] * 1e3
    m[:, t.col("optic_rx_power_nw")] = st.tx_mw[inn] * FIBRE_LOSS * 1e6
    m[:, t.col("optic_temperature_mc")] = MODULE_TEMPERATURE_MC
    for name, value in OPTIC_THRESHOLDS.items():
        m[:, t.col(name)] = value
    # The peer pausing our egress is what we receive; our pausing the peer's egress is what we send.
    m[:, t.col("rx_pfc_frames", QUEUE)] = st.pause[out] * st.pause_fps[out]
    m[:, t.col("rx_pfc_duration_us", QUEUE)] = st.pause[out] * 1e6
    m[:, t.col("tx_pfc_frames", QUEUE)] = st.pause[inn] * st.pause_fps[inn]
    m[:, t.col("tx_pfc_duration_us", QUEUE)] = st.pause[inn] * 1e6


class Bank:
    """Cumulative counters of all ports of one device kind, read as raw values with offsets and wraps."""

    def __init__(self, table: Table, rows: int, start: str, rng: np.random.Generator) -> None:
        self.table = table
        self.total = np.zeros((rows, len(table.specs)))
        self.last = np.zeros_like(self.total)
        self.offset = _offsets(table, rows, start, rng)
        self.occupancy = table.col("queue_occupancy_bytes", QUEUE) if table is SWITCH_TABLE else None
        self.watermark = table.col("queue_watermark_bytes", QUEUE) if table is SWITCH_TABLE else None

    def add(self, rate: np.ndarray, seconds: float) -> None:
        self.total += rate * seconds

    def bump(self, row: int, name: str, amount: int) -> None:
        self.total[row, self.table.col(name)] += amount

    def reset(self, rows: slice) -> None:
        """A driver reload: every counter of the device restarts from zero."""
        self.total[rows] = 0.0
        self.last[rows] = 0.0
        self.offset[rows] = 0

    def read(self, rate: np.ndarray, back: np.ndarray) -> np.ndarray:
        """Raw counter values read ``back`` seconds (per row) before now, as uint64.

        Reading slightly in the past (the collector's jitter) rewinds along the current rate; the
        running maximum keeps a counter from ever stepping back through float rounding.
        """
        seen = np.maximum(self.total - rate * back[:, None], self.last)
        self.last = seen
        values = self.offset + np.floor(seen).astype(np.uint64)
        values[:, self.table.mask32] &= np.uint64(0xFFFFFFFF)
        values[:, ~self.table.counter] = 0
        return values


def _offsets(table: Table, rows: int, start: str, rng: np.random.Generator) -> np.ndarray:
    """Counters of a device that has been up for a while: anywhere in their range, or about to wrap.

    The link-state columns draw from a generator of their own, so that adding them left every
    other random stream of a seeded scenario (noise, gaps, jitter) as it was; columns added since
    draw from it after them, leaving theirs as they were too."""
    link = np.array([s.name in _LINK for s in table.specs])
    added = np.array([s.name in _ADDED for s in table.specs])
    phy = np.array([s.name in _PHY + _PCIE for s in table.specs])
    state = np.array([s.name in _STATE for s in table.specs])
    out = np.zeros((rows, len(table.specs)), dtype=np.uint64)
    own = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])  # type: ignore[attr-defined]
    rest = ~link & ~added & ~phy & ~state
    for cols, draw in ((rest, rng), (link, own), (added, own), (phy, own), (state, own)):
        if cols.any():
            out[:, cols] = _draw(table.mask32[cols], rows, start, draw)
    return out


def _draw(mask32: np.ndarray, rows: int, start: str, rng: np.random.Generator) -> np.ndarray:
    shape = (rows, len(mask32))
    if start == "zero":
        return np.zeros(shape, dtype=np.uint64)
    if start == "near_wrap":
        below = np.where(mask32, NEAR_WRAP[32], NEAR_WRAP[64])
        gap = rng.integers(1, below, size=shape, dtype=np.uint64)
        return np.where(mask32, np.uint64(2**32) - gap, np.uint64(0) - gap)
    top = np.where(mask32, 2**32, WIDE_START)
    return rng.integers(0, top, size=shape, dtype=np.uint64)
