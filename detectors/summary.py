"""A device's rates projected onto the fixed per-port columns that storage and dashboards use.

A ``RateFrame`` has whatever counters the device reports (per port, per priority, per queue); a
dashboard wants the same few numbers for every port whatever the vendor: bits and packets per
second, pause frames and pause time summed over priorities, ECN marks summed over queues plus what
a NIC received marked, CNPs, drops, errors, the deepest queue and the highest watermark; and what
says why a port is lossy or stalled: CRC and FEC errors, bytes dropped from queues, ingress
priority-group drops and watermarks, the PFC watchdog's storms and the packets it dropped.

The projection is a matrix per counter table (computed once per ``Layout``), so one frame costs a
matrix product and two reductions whatever its width: no Python loop over counters. A sum is
unknown (NaN) only when none of its counters is known for that port; a counter the device does not
report at all simply does not contribute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.schemas.messages import PORT_RATE_COLUMNS, PortRates, RatesBatch

_SUMS: dict[str, tuple[tuple[str, float], ...]] = {
    "tx_bps": (("tx_bytes", 8.0),),
    "rx_bps": (("rx_bytes", 8.0),),
    "tx_pps": (("tx_packets", 1.0),),
    "rx_pps": (("rx_packets", 1.0),),
    "rx_pause_pps": (("rx_pfc_frames", 1.0), ("rx_pause_frames", 1.0)),
    "tx_pause_pps": (("tx_pfc_frames", 1.0), ("tx_pause_frames", 1.0)),
    "rx_pause_frac": (("rx_pfc_duration_us", 1e-6),),
    "tx_pause_frac": (("tx_pfc_duration_us", 1e-6), ("tx_pause_duration_us", 1e-6)),
    "ecn_marked_pps": (("queue_ecn_marked_packets", 1.0), ("rx_ecn_marked_packets", 1.0)),
    "cnp_sent_pps": (("cnp_sent", 1.0),),
    "cnp_received_pps": (("cnp_received", 1.0),),
    "discards_pps": (
        ("rx_discards", 1.0),
        ("tx_discards", 1.0),
        ("queue_drops", 1.0),
        ("out_of_buffer", 1.0),
    ),
    "errors_pps": (("rx_errors", 1.0), ("tx_errors", 1.0)),
    "crc_errors_pps": (("rx_crc_errors", 1.0),),
    "fec_corrected_ps": (("fec_corrected_blocks", 1.0),),
    "fec_uncorrectable_ps": (("fec_uncorrectable_blocks", 1.0),),
    "queue_dropped_bps": (("queue_dropped_bytes", 8.0),),
    "pg_drops_pps": (("pg_drops", 1.0),),
    "pfcwd_storms_ps": (("pfcwd_storms_detected", 1.0),),
    "pfcwd_dropped_pps": (("pfcwd_tx_dropped_packets", 1.0), ("pfcwd_rx_dropped_packets", 1.0)),
}
"""Output column → the counters (every priority/queue of an indexed one) summed, with their scale."""

_MAXES: dict[str, str] = {
    "queue_bytes_max": "queue_occupancy_bytes",
    "watermark_bytes_max": "queue_watermark_bytes",
    "pg_headroom_bytes_max": "pg_headroom_watermark_bytes",
    "pg_shared_bytes_max": "pg_shared_watermark_bytes",
}
"""Output column → the per-queue (or per-priority-group) gauge whose maximum over the port it is."""

_UTIL = {"tx_util": "tx_bps", "rx_util": "rx_bps"}
"""Utilisation columns: the bit rate over the line rate."""

RATES_BATCH_ROWS = 2048
"""Ports per ``RatesBatch`` at most: about 600 KB of JSON, below Kafka's default 1 MB message limit."""

_COLUMN = {name: i for i, name in enumerate(PORT_RATE_COLUMNS)}
_SUM_OUT = np.array([_COLUMN[m] for m in _SUMS], dtype=np.intp)


@dataclass(frozen=True)
class _Projection:
    weights: np.ndarray  # counters x sum-columns
    contributes: np.ndarray  # the same, 1.0 where a counter feeds a column
    absent: np.ndarray  # sum-columns no counter of the layout feeds
    maxes: tuple[tuple[int, np.ndarray], ...]  # (output column, counter columns)
    present: np.ndarray
    """Per output column, whether any counter of the layout feeds it (the others are NaN in every row)."""


_projections: dict[tuple, _Projection] = {}


def _projection(layout: Layout) -> _Projection:
    found = _projections.get(layout.counters)
    if found is not None:
        return found
    weights = np.zeros((len(layout.counters), len(_SUMS)))
    by_name: dict[str, list[int]] = {}
    for pos, spec in enumerate(layout.counters):
        by_name.setdefault(spec.name, []).append(pos)
    for j, parts in enumerate(_SUMS.values()):
        for name, scale in parts:
            weights[by_name.get(name, []), j] = scale
    maxes = tuple(
        (_COLUMN[out], np.array(by_name.get(name, []), dtype=np.intp)) for out, name in _MAXES.items()
    )
    contributes = (weights != 0).astype(float)
    absent = ~contributes.any(axis=0)
    present = np.zeros(len(PORT_RATE_COLUMNS), dtype=bool)
    present[_SUM_OUT] = ~absent
    for col, cols in maxes:
        present[col] = cols.size > 0
    for util, bps in _UTIL.items():
        present[_COLUMN[util]] = present[_COLUMN[bps]]
    found = _Projection(weights, contributes, absent, maxes, present)
    _projections[layout.counters] = found
    return found


def project(frame: RateFrame, line_bytes_ps: np.ndarray | None = None) -> np.ndarray:
    """The ports x ``PORT_RATE_COLUMNS`` matrix (NaN = unknown). ``line_bytes_ps`` is each port's
    line rate in bytes per second (``FabricMap.port_speeds_bps``); without it utilisation is unknown."""
    return _project_rows(frame.layout, frame.values, line_bytes_ps)


def _project_rows(layout: Layout, values: np.ndarray, line_bytes_ps: np.ndarray | None) -> np.ndarray:
    """``project`` of any number of rows of one layout: every output row depends on its own row
    only, so the ports of many frames stack into one call."""
    proj = _projection(layout)
    known = ~np.isnan(values)
    if known.all():  # the usual poll: one product, not three passes and two
        sums = values @ proj.weights
        sums[:, proj.absent] = np.nan
    else:
        sums = np.where(known, values, 0.0) @ proj.weights
        sums[(known @ proj.contributes) == 0] = np.nan
    out = np.full((values.shape[0], len(PORT_RATE_COLUMNS)), np.nan)
    out[:, _SUM_OUT] = sums
    for col, cols in proj.maxes:
        if cols.size:
            out[:, col] = np.fmax.reduce(values[:, cols], axis=1)  # NaN only where all are unknown
    if line_bytes_ps is not None:
        line_bps = np.asarray(line_bytes_ps, dtype=np.float64) * 8.0
        with np.errstate(divide="ignore", invalid="ignore"):
            for util, bps in _UTIL.items():
                out[:, _COLUMN[util]] = np.where(line_bps > 0, out[:, _COLUMN[bps]] / line_bps, np.nan)
    return out


def summarise(frame: RateFrame, line_bytes_ps: np.ndarray | None = None) -> PortRates:
    """The storage message of one frame."""
    return PortRates.of(
        frame.device,
        frame.device_kind,  # type: ignore[arg-type]
        frame.ts_ns,
        frame.dt_s,
        list(frame.ports),
        list(PORT_RATE_COLUMNS),
        project(frame, line_bytes_ps),
    )


def summarise_batch(
    frames: Sequence[RateFrame], lines: Sequence[np.ndarray | None], max_rows: int = RATES_BATCH_ROWS
) -> list[RatesBatch]:
    """The storage messages of many frames, in their order, each of at most ``max_rows`` ports
    (a frame is never split). Frames of one layout are projected in one pass (a NIC frame is one
    row: per frame, numpy's per-call cost was the whole cost of ``project``)."""
    out: list[RatesBatch] = []
    start, rows = 0, 0
    for i, frame in enumerate(frames):
        if rows and rows + len(frame.ports) > max_rows:
            out.append(_batch(frames[start:i], lines[start:i]))
            start, rows = i, 0
        rows += len(frame.ports)
    if start < len(frames):
        out.append(_batch(frames[start:], lines[start:]))
    return out


def _batch(frames: Sequence[RateFrame], lines: Sequence[np.ndarray | None]) -> RatesBatch:
    """The columns some frame's counters feed, and no others: a switch feeds no CNP column and a
    NIC no queue's, and a column NaN in every row was a third to a half of the message's bytes
    (readers map columns by name, and a missing one is unknown: ``docs/storage.md``)."""
    counts = [len(f.ports) for f in frames]
    offsets = np.concatenate(([0], np.cumsum(counts)))
    matrix = np.empty((int(offsets[-1]), len(PORT_RATE_COLUMNS)))
    groups: dict[int, list[int]] = {}
    for i, frame in enumerate(frames):
        groups.setdefault(id(frame.layout), []).append(i)
    present = np.zeros(len(PORT_RATE_COLUMNS), dtype=bool)
    for members in groups.values():
        present |= _projection(frames[members[0]].layout).present
        values = np.concatenate([frames[i].values for i in members])
        line = np.concatenate(
            [np.full(counts[i], np.nan) if lines[i] is None else lines[i] for i in members]  # type: ignore[list-item]
        )
        projected = _project_rows(frames[members[0]].layout, values, line)
        if len(members) == len(frames):  # one layout: the rows are in place already
            matrix[:] = projected
            continue
        matrix[np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in members])] = projected
    return RatesBatch(
        [f.device for f in frames],
        [f.device_kind for f in frames],  # type: ignore[misc]
        [f.ts_ns for f in frames],
        [f.dt_s for f in frames],
        counts,
        [p for f in frames for p in f.ports],
        [c for c, kept in zip(PORT_RATE_COLUMNS, present.tolist(), strict=True) if kept],
        np.ascontiguousarray(matrix[:, present], dtype="<f8").tobytes(),
    )
