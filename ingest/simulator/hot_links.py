"""Ground truth for capacity findings: the switch ports and uplink groups whose traffic, as the
simulation carries it before any noise, averages at or above the band's top over a window.

A capacity finding is defined by a statistic of the traffic, not by a fault: any scenario whose
jobs run a link hot for long enough has one, look-alike or not. So these labels come from the
simulated utilisation itself: per switch port the busier of its two directions, per ECMP group its
members' mean; a spell where the rolling mean over ``window_s`` (what has run so far, once that is
``min_coverage`` of a window, as the detector judges) holds at or above ``band_top``, or at or above
``band_bottom`` with ``peak_share`` of the window at ``peak`` or more, is labelled from the window's
start when it first holds (the traffic that made it) to its last poll. The share of polls at
``peak`` is the expected one under the collector's noise (each poll's traffic varies by ``noise``
around the segment's rate): a link at 90 % under 4 % noise reads 95 % in 8 % of its polls, as the
detector then sees it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy.special import ndtr

from fabricwatch.ingest.simulator.fabric import Fabric
from fabricwatch.schemas.capacity import CapacityConfig
from fabricwatch.schemas.messages import Label, RootCause

NS = 1_000_000_000


def hot_link_labels(
    fabric: Fabric,
    segments: Iterable[tuple[float, float, np.ndarray]],
    duration_s: float,
    poll_s: float,
    start_ns: int,
    noise: float,
    config: CapacityConfig | None = None,
) -> list[Label]:
    """``segments``: ``(t0, t1, util)`` in seconds, ``util`` per directed link, noise-free."""
    config = config or CapacityConfig()
    out, inn, members, names = _rows(fabric)
    edges, areas = [0.0], [np.zeros(int(fabric.n_links))]
    for t0, t1, util in segments:
        areas.append(areas[-1] + util * (t1 - t0))
        edges.append(t1)
    polls = np.arange(poll_s, duration_s + poll_s / 2, poll_s)
    if polls.size == 0:
        return []
    # What each poll reads: the mean of its interval per directed link (a sub-poll burst averaged
    # out, as counters average it), then per port the busier direction, per group what it sends.
    read = np.diff(np.vstack([np.zeros(len(areas[0])), _at(edges, np.stack(areas), polls)]), axis=0) / poll_s
    read = np.hstack([read, np.zeros((len(polls), 1))])  # column -1: no link in that direction
    ports = np.maximum(read[:, out], read[:, inn])
    real = members >= 0
    sent = np.where(real[None], read[:, out[members]], 0.0).sum(axis=2) / np.maximum(real.sum(axis=1), 1)
    rows = np.hstack([ports, sent])
    # As the detector judges: a window of what has been read so far, once that is half of one.
    window = max(1, round(config.window_s / poll_s))
    n = np.minimum(np.arange(1, len(polls) + 1), window)
    judged = n * poll_s >= config.min_coverage * config.window_s

    def rolling(per_poll: np.ndarray) -> np.ndarray:
        total = np.vstack([np.zeros(per_poll.shape[1]), np.cumsum(per_poll, axis=0)])
        i = np.arange(1, len(polls) + 1)
        return (total[i] - total[i - n]) / n[:, None]

    mean, peaks = rolling(rows), rolling(_share_at(rows, config.peak, noise))
    hot = judged[:, None] & (
        (mean >= config.band_top) | ((mean >= config.band_bottom) & (peaks >= config.peak_share))
    )
    times, span = polls, n * poll_s
    labels = []
    for r, root in enumerate(names):
        for first, last in _runs(hot[:, r]):
            begin = times[first] - span[first]
            note = f"capacity: {_what(root)} averages {mean[first : last + 1, r].max():.0%} of line rate"
            labels.append(
                Label(
                    "capacity",
                    start_ns + round(begin * NS),
                    start_ns + round(float(times[last]) * NS),
                    root,
                    note=note,
                )
            )
    return labels


def _rows(fabric: Fabric) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[RootCause]]:
    """Per switch port its out and in links (-1: none); per ECMP group its members' port rows
    (padded with -1); and the root each row is labelled at, ports first."""
    out, inn, names = [], [], []
    for s, device in enumerate(fabric.switches):
        base = fabric.n_nics + int(fabric.switch_rows[s])
        for k, port in enumerate(fabric.switch_ports[s]):
            out.append(int(fabric.port_out[base + k]))
            inn.append(int(fabric.port_in[base + k]))
            names.append(RootCause(device, port))
    at = {(root.device, root.port): i for i, root in enumerate(names)}
    groups = [
        (g, [at[(g.device, m)] for m in g.members if (g.device, m) in at])
        for g in fabric.topology(0).ecmp_groups
    ]
    groups = [(g, rows) for g, rows in groups if len(rows) >= 2]
    width = max((len(rows) for _, rows in groups), default=0)
    members = np.full((len(groups), width), -1, dtype=np.intp)
    for i, (_, rows) in enumerate(groups):
        members[i, : len(rows)] = rows
    names += [RootCause(g.device, group=g.id) for g, _ in groups]
    return np.array(out, dtype=np.intp), np.array(inn, dtype=np.intp), members, names


def _share_at(util: np.ndarray, peak: float, noise: float) -> np.ndarray:
    """The share of polls that read ``peak`` or more from traffic at ``util`` varying by ``noise``."""
    if noise <= 0:
        return (util >= peak).astype(float)
    with np.errstate(divide="ignore"):
        z = (peak / util - 1.0) / noise
    return np.where(util > 0, ndtr(-z), 0.0)


def _at(edges: list[float], area: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The integral of each row up to each time in ``t`` (piecewise linear between edges)."""
    e = np.asarray(edges)
    i = np.clip(np.searchsorted(e, t, side="right") - 1, 0, len(e) - 2)
    frac = np.clip((t - e[i]) / np.maximum(e[i + 1] - e[i], 1e-12), 0.0, 1.0)
    return area[i] + (area[i + 1] - area[i]) * frac[:, None]


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Index ranges (first, last) where ``mask`` holds."""
    padded = np.concatenate([[False], mask, [False]])
    change = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return [(int(a), int(b) - 1) for a, b in zip(change[0::2], change[1::2], strict=True)]


def _what(root: RootCause) -> str:
    return f"uplink group {root.group}" if root.group else f"{root.device} {root.port}"
