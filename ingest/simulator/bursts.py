"""Ground truth for microburst findings: the switch egress queues that, poll after poll, fill into
the ECN marking band while the poll's mean rate stays low.

Like a capacity finding, a microburst finding is defined by the traffic, not by a fault: a job's
bursty All-to-All makes one as much as an ``absorbed_burst`` look-alike does. So these labels come
from the simulation's own state, segment by segment, before any noise: per poll interval and
switch egress queue, the deepest the queue stood (the watermark the next read shows) and the mean
rate of its link. A poll bursts when the queue went past the fabric's Kmin (where WRED starts
marking: the detector sees the marks) and was back below it, and below half its peak, when read, at a mean
below ``max_mean_utilisation``, with the port not held by its peer's pauses (a storm's queue stands
still; it does not burst).
The labels follow the detector's rule (``schemas/bursts.py``) over a sliding window of what has
been read so far: a queue bursting in ``min_share`` of the window's polls (at least
``min_bursts``), until that share or count halves, labelled from the window's first burst when it first
holds.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.ingest.simulator.counters import QUEUE
from fabricwatch.ingest.simulator.fabric import Fabric
from fabricwatch.schemas.bursts import MicroburstConfig
from fabricwatch.schemas.messages import Label, RootCause

NS = 1_000_000_000


class BurstTruth:
    """Per poll interval and switch egress queue, its deepest point and its link's mean rate, fed
    segment by segment (``add``); then the labels (``labels``)."""

    def __init__(
        self,
        fabric: Fabric,
        duration_s: float,
        poll_s: float,
        kmin_bytes: float,
        config: MicroburstConfig | None = None,
    ) -> None:
        self.fabric, self.poll_s, self.kmin = fabric, poll_s, kmin_bytes
        self.config = config or MicroburstConfig()
        n_polls, rows = round(duration_s / poll_s), int(fabric.switch_rows[-1])
        self.out = fabric.port_out[fabric.n_nics : fabric.n_nics + rows]
        self.peak = np.zeros((n_polls, rows))
        self.sent = np.zeros((n_polls, rows))
        self.paused = np.zeros((n_polls, rows))
        self.last = np.zeros((n_polls, rows))

    def add(self, t0: float, t1: float, util: np.ndarray, queue: np.ndarray, paused: np.ndarray) -> None:
        """One segment: ``util`` per directed link; ``queue`` and ``paused`` (the share of time the
        port's peer pauses it) per switch row. Segments never span a poll: the simulator cuts time
        at every poll, so the last segment added to a poll is its queue when read."""
        k = int(t0 / self.poll_s + 1e-9)
        if k >= len(self.peak):
            return
        np.maximum(self.peak[k], queue, out=self.peak[k])
        self.last[k] = queue
        self.sent[k] += np.where(self.out >= 0, util[self.out], 0.0) * (t1 - t0)
        self.paused[k] += paused * (t1 - t0)

    def labels(self, start_ns: int) -> list[Label]:
        c, poll_s = self.config, self.poll_s
        burst = (
            (self.peak > self.kmin)
            & c.drained(self.last, self.peak, self.kmin)
            & (self.sent / poll_s < c.max_mean_utilisation)
            & (self.paused / poll_s < c.min_pause_fraction)
        )
        window = max(1, round(c.window_s / poll_s))
        total = np.vstack([np.zeros(burst.shape[1]), np.cumsum(burst, axis=0)])
        i = np.arange(1, len(burst) + 1)
        n = np.minimum(i, window)
        bursts = total[i] - total[i - n]
        share = bursts / n[:, None]
        judged = c.judged(n, poll_s)[:, None]
        often, rare = judged & c.often(bursts, share), judged & c.rare(bursts, share)
        out = []
        for row in np.flatnonzero(often.any(axis=0)):
            for first, last in _spells(often[:, row], rare[:, row]):
                lo = first + 1 - n[first]
                begin = (lo + int(np.argmax(burst[lo : first + 1, row]))) * poll_s  # its first burst
                out.append(
                    self._label(
                        int(row),
                        start_ns,
                        begin,
                        (last + 1) * poll_s,
                        int(bursts[first : last + 1, row].max()),
                    )
                )
        return out

    def _label(self, row: int, start_ns: int, begin: float, end: float, most: int) -> Label:
        sw = int(np.searchsorted(self.fabric.switch_rows, row, side="right")) - 1
        device = self.fabric.switches[sw]
        port = self.fabric.switch_ports[sw][row - int(self.fabric.switch_rows[sw])]
        window = round(self.config.window_s / self.poll_s)
        note = (
            f"microbursts: {device} {port} queue {QUEUE} past Kmin in up to {most} of {window} polls "
            "at a low mean rate"
        )
        return Label(
            "microbursts",
            start_ns + round(begin * NS),
            start_ns + round(end * NS),
            RootCause(device, port, priority=QUEUE),
            note=note,
        )


def _spells(start: np.ndarray, stop: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) polls of each spell that begins where ``start`` holds and lasts until the poll
    before ``stop`` holds (the detector's hysteresis)."""
    spells, on, first = [], False, 0
    for k in np.flatnonzero(start | stop):
        if not on and start[k]:
            on, first = True, int(k)
        elif on and stop[k]:
            spells.append((first, int(k) - 1))
            on = False
    if on:
        spells.append((first, len(start) - 1))
    return spells
