"""PFC storm watchdog, per device, with SONiC PFC watchdog semantics.

A queue is in storm when it is paused (PFC frames received for its priority, or paused for at
least ``paused_fraction`` of the interval), still has data queued, and transmits nothing, and this
has lasted ``detection_time``. It is restored after ``restoration_time`` without new pause frames.
Switches report queue occupancy and per-queue transmit counters; a NIC does not, so on a NIC the
test is "paused nearly all the interval and sending nearly nothing".

Unknown rates (NaN) compare false everywhere, so a missing counter never makes a storm.
Because a poll covers a whole interval, "paused for the interval" is read from the pause duration
counter (microseconds paused per second), which is exact, rather than inferred from frame counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import cell_symptom, evidence
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.persistence import LACK_OF_DATA_S, StreakTable
from fabricwatch.detectors.rates import CounterColumns
from fabricwatch.detectors.spec import (
    Describer,
    Detector,
    IncidentKind,
    Placement,
    Poll,
    PollStack,
    SymptomKind,
)
from fabricwatch.schemas.config import Fraction, Positive
from fabricwatch.schemas.messages import RootCause, Symptom

_US_PER_S = 1e6


class PfcStormConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    lack_of_data_s: Positive = LACK_OF_DATA_S
    detection_time_s: Positive = 0.2
    restoration_time_s: Positive = 0.2
    paused_fraction: Fraction = 0.99
    idle_tx_fraction: Fraction = 0.01
    stalled_queue_bytes: Positive = 150_000.0
    """A switch egress that stalled unpaused fills its queue to the PFC threshold; a few packets
    left on a barely used queue are not that (the default ECN Kmin: past where marking begins)."""


class PfcWatchdog:
    SIGNALS = frozenset({"rx_pfc_frames", "rx_pfc_duration_us"})
    """Counters without which (none above zero) a device's poll cannot start a storm."""

    def __init__(self, config: PfcStormConfig) -> None:
        self.config = config
        self._storm = StreakTable()
        self._quiet = StreakTable()

    def open(self, device: str) -> bool:
        """Whether the device has a storm running or reported (its next poll matters regardless)."""
        return self._storm.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        frame, line_Bps = poll.frame, poll.line_Bps
        if not frame.any_above_zero(self.SIGNALS) and not self.open(frame.device):
            return []  # nothing paused and nothing open: the poll would change nothing
        rx_frames, prios = frame.indexed("rx_pfc_frames")
        if prios.size == 0:
            return []
        paused_frac = _by_priority(frame, "rx_pfc_duration_us", prios) / _US_PER_S
        storming = self._condition(frame, rx_frames, paused_frac, prios, line_Bps)
        quiet = (rx_frames == 0) & ~(paused_frac >= self.config.paused_fraction)
        known = ~(np.isnan(rx_frames) & np.isnan(paused_frac))

        storm = self._storm.get(frame.device, storming.shape)
        calm = self._quiet.get(frame.device, storming.shape)
        storm.step(storming, frame.ts_ns, frame.dt_s, known=known)
        if storm.running or storm.any_active:  # quiet time matters only to a storm
            calm.step(quiet, frame.ts_ns, frame.dt_s, known=known)
        storm.start(storm.seconds >= self.config.detection_time_s)
        cleared = storm.stop(calm.seconds >= self.config.restoration_time_s)
        ended = storm.lapse(frame.ts_ns, self.config.lack_of_data_s)

        tx = frame.port("tx_bytes")

        def proof(p: int, q: int) -> dict[str, float | int | str]:
            return evidence(
                paused_fraction=paused_frac[p, q],
                tx_utilisation=tx[p] / line_Bps[p] if tx is not None else math.nan,
            )

        return storm.report(
            cleared,
            lambda i, active: cell_symptom(
                "pfc_storm", frame, storming.shape, i, prios, storm.since_ns, active, proof
            ),
            known,
            frame.ts_ns,
            ended,
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll: nothing paused, or no queue paused that holds data and sends nothing."""
        _, prios = stack.indexed("rx_pfc_frames")
        if prios.size == 0:
            return np.ones(len(stack.frames), dtype=bool)
        paused = stack.above_zero(self.SIGNALS)
        passed = ~paused
        if not paused.any():
            return passed
        stack = stack.only(paused)
        rx_frames = stack.indexed("rx_pfc_frames")[0]
        paused_frac = _by_priority(stack, "rx_pfc_duration_us", prios) / _US_PER_S
        storming = self._condition(stack, rx_frames, paused_frac, prios, stack.line_Bps)
        passed[paused] = ~storming.any(axis=(1, 2))
        return passed

    def pass_over(self, poll: Poll) -> None:
        """Nothing to keep: a poll that starts no storm leaves no trace while none is open."""

    def _condition(
        self,
        frame: CounterColumns,
        rx_frames: np.ndarray,
        paused_frac: np.ndarray,
        prios: np.ndarray,
        line_Bps: np.ndarray,
    ) -> np.ndarray:
        cfg = self.config
        idle_Bps = cfg.idle_tx_fraction * line_Bps[..., None]
        occupancy = frame.aligned("queue_occupancy_bytes", prios)
        if occupancy is None:
            tx = frame.port("tx_bytes")[..., None]
            return (paused_frac >= cfg.paused_fraction) & (tx < idle_Bps)
        queue_tx = frame.aligned("queue_tx_bytes", prios)
        if queue_tx is None:
            queue_tx = np.repeat(frame.port("tx_bytes")[..., None], prios.size, axis=-1)
        paused = (rx_frames > 0) | (paused_frac >= cfg.paused_fraction)
        queued = occupancy > 0
        silent = queue_tx < idle_Bps
        return paused & queued & silent


def _by_priority(frame: CounterColumns, name: str, wanted: np.ndarray) -> np.ndarray:
    found = frame.aligned(name, wanted)
    return np.full((*frame.values.shape[:-1], wanted.size), np.nan) if found is None else found


class StalledEgress:
    """The root's side of a storm rooted at a switch: an egress queue that holds data and transmits
    nothing without being paused (a deadlock, or a switch whose egress stopped draining), while the
    switch pauses its own ingress ports, since what they bring has nowhere to go. Nothing downstream
    asks it to stop, so it is where the pauses begin: its ports' storms walk to it.

    Reported as ``pfc_pausing`` after ``detection_time``, like the NIC's side of a storm; restored
    after ``restoration_time`` of the queue draining or empty. A switch without a depth gauge shows
    the queue by its watermark (peak since the last read: a stuck queue's data never leaves).
    Unknown pause counters never make a port "not paused".
    """

    SIGNALS = frozenset({"tx_pfc_frames"})
    """Counters without which (none above zero: the switch pauses no ingress port) a poll cannot
    start a stall."""

    def __init__(self, config: PfcStormConfig) -> None:
        self.config = config
        self._stall = StreakTable()
        self._flowing = StreakTable()

    def open(self, device: str) -> bool:
        return self._stall.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        frame, line_Bps = poll.frame, poll.line_Bps
        if not frame.any_above_zero(self.SIGNALS) and not self._stall.open(frame.device):
            return []  # no ingress port paused and nothing open: the poll would change nothing
        read = _Egress.read(self.config, frame, line_Bps)
        if read is None:
            return []
        cfg, prios, tx_pfc, queue_tx, held = self.config, read.prios, read.tx_pfc, read.queue_tx, read.held
        stall = self._stall.get(frame.device, read.full.shape)
        flowing = self._flowing.get(frame.device, read.full.shape)
        stalled = read.stalled(stall.polls == 0)
        known = ~(np.isnan(queue_tx) | np.isnan(held) | np.isnan(read.rx_frames))
        stall.step(stalled, frame.ts_ns, frame.dt_s, held_s=(1.0 - read.sent) * frame.dt_s, known=known)
        if not stall.running and not stall.any_active:
            return []
        flowing.step(~read.silent | ~read.full, frame.ts_ns, frame.dt_s, known=known)
        stall.start(stall.seconds >= cfg.detection_time_s)
        cleared = stall.stop(flowing.seconds >= cfg.restoration_time_s)
        ended = stall.lapse(frame.ts_ns, cfg.lack_of_data_s)

        def proof(p: int, q: int) -> dict[str, float | int | str]:
            return evidence(
                queue_bytes=held[p, q],
                queue_tx_utilisation=queue_tx[p, q] / line_Bps[p],
                ingress_ports_paused=int((tx_pfc[:, q] > 0).sum()),
            )

        return stall.report(
            cleared,
            lambda i, active: cell_symptom(
                "pfc_pausing", frame, stalled.shape, i, prios, stall.since_ns, active, proof
            ),
            known,
            frame.ts_ns,
            ended,
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll: no ingress port paused, or no queue stalled as in a stall's first poll."""
        pausing = stack.above_zero(self.SIGNALS)
        if pausing.any():  # and a queue that holds what a stalled one holds: cheaper, read first
            held = _held(stack.only(pausing), stack.indexed("rx_pfc_frames")[1])
            if held is not None:
                pausing[pausing] = (held >= self.config.stalled_queue_bytes).any(axis=(1, 2))
        passed = ~pausing
        if not pausing.any():
            return passed
        stack = stack.only(pausing)
        read = _Egress.read(self.config, stack, stack.line_Bps)
        passed[pausing] = True if read is None else ~read.stalled(True).any(axis=(1, 2))
        return passed

    def pass_over(self, poll: Poll) -> None:
        """Nothing to keep: a poll that starts no stall leaves no trace while none is open."""


@dataclass(frozen=True)
class _Egress:
    """What a switch's poll (or a stack of them: a leading axis) shows of each (port, priority)
    queue's egress: ``StalledEgress.update`` and its ``screen`` read it the same way."""

    prios: np.ndarray
    rx_frames: np.ndarray
    tx_pfc: np.ndarray
    queue_tx: np.ndarray
    held: np.ndarray
    """What the queue holds: its depth, or its watermark on a switch without a depth gauge."""
    not_paused: np.ndarray
    silent: np.ndarray
    pausing_ingress: np.ndarray
    full: np.ndarray
    sent: np.ndarray
    """The share of line rate it sent, 0 to 1."""

    @classmethod
    def read(cls, cfg: PfcStormConfig, frame: CounterColumns, line_Bps: np.ndarray) -> _Egress | None:
        """None where the switch lacks what a stall is read from."""
        rx_frames, prios = frame.indexed("rx_pfc_frames")
        tx_pfc = frame.aligned("tx_pfc_frames", prios)
        queue_tx = frame.aligned("queue_tx_bytes", prios)
        if prios.size == 0 or tx_pfc is None or queue_tx is None:
            return None
        held = _held(frame, prios)
        if held is None:
            return None
        paused_frac = _by_priority(frame, "rx_pfc_duration_us", prios) / _US_PER_S
        return cls(
            prios,
            rx_frames,
            tx_pfc,
            queue_tx,
            held,
            not_paused=(rx_frames == 0) & ~(paused_frac >= cfg.paused_fraction),
            silent=queue_tx < cfg.idle_tx_fraction * line_Bps[..., None],
            pausing_ingress=(tx_pfc > 0).any(axis=-2, keepdims=True),
            full=held >= cfg.stalled_queue_bytes,
            sent=np.clip(np.nan_to_num(queue_tx / line_Bps[..., None]), 0.0, 1.0),
        )

    def stalled(self, first: np.ndarray | bool) -> np.ndarray:
        """Full, silent, not paused, and its switch pausing ingress; or, in a stall's ``first``
        poll, full and sending under half its line rate: the poll in which it stopped counts for
        the share of it spent stopped (as the NIC's pause time does), when that is most of it. A
        port still sending half its line rate is a busy queue (an incast pausing its feeders),
        not a stopped one."""
        stopped = self.full & self.not_paused & self.pausing_ingress
        return (stopped & self.silent) | (stopped & (self.sent < 0.5) & first)


class NicPauseStorm:
    """The root's side of a storm: a NIC that keeps pausing its switch port.

    The NIC's own firmware watches for this at a resolution no poller has: mlx5 counts a
    ``tx_pause_storm_warning_event`` when it has sent pauses without a break for 85% of its stall
    timeout (100 ms by default). A warning starts a storm in the partly paused interval in which it
    began; intervals paused throughout (``paused_fraction``) continue it; it is reported once
    ``detection_time`` of pausing has accumulated (the pause duration counter says how much of each
    interval). The switch-side watchdog, in contrast, must wait for a whole paused interval.
    Restored like the watchdog: after ``restoration_time`` without pausing.
    """

    SIGNALS = frozenset({"tx_pfc_duration_us", "pause_storm_warning_events"})

    def __init__(self, config: PfcStormConfig) -> None:
        self.config = config
        self._storm = StreakTable()
        self._quiet = StreakTable()

    def open(self, device: str) -> bool:
        return self._storm.open(device)

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        pause_us, prios = frame.indexed("tx_pfc_duration_us")
        if frame.device_kind != "nic" or prios.size == 0:
            return []
        cfg = self.config
        frac = pause_us / _US_PER_S
        warned = frame.port("pause_storm_warning_events")
        storm = self._storm.get(frame.device, frac.shape)
        calm = self._quiet.get(frame.device, frac.shape)
        pausing = self._pausing(frac, warned, storm.polls == 0)
        paused_s = np.minimum(np.nan_to_num(frac), 1.0) * frame.dt_s
        known = ~np.isnan(frac)
        storm.step(pausing, frame.ts_ns, frame.dt_s, held_s=paused_s, known=known)
        if not storm.running and not storm.any_active:
            return []
        began = pausing & (storm.polls == 1)
        storm.since_ns[began] = frame.ts_ns - (paused_s[began] * 1e9).astype(np.int64)  # when pausing began
        calm.step(~(frac > 0), frame.ts_ns, frame.dt_s, known=known)  # unknown is not calm
        storm.start(storm.seconds >= cfg.detection_time_s)
        cleared = storm.stop(calm.seconds >= cfg.restoration_time_s)
        ended = storm.lapse(frame.ts_ns, cfg.lack_of_data_s)

        def proof(p: int, k: int) -> dict[str, float | int | str]:
            return evidence(
                pausing_fraction=frac[p, k],
                storm_warnings=warned[p] if warned is not None else math.nan,
            )

        return storm.report(
            cleared,
            lambda i, active: cell_symptom(
                "pfc_pausing", frame, pausing.shape, i, prios, storm.since_ns, active, proof
            ),
            known,
            frame.ts_ns,
            ended,
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll: no priority paused all poll, and none with a storm warning."""
        pause_us, prios = stack.indexed("tx_pfc_duration_us")
        if prios.size == 0 or stack.frames[0].device_kind != "nic":
            return np.ones(len(stack.frames), dtype=bool)
        pausing = self._pausing(pause_us / _US_PER_S, stack.port("pause_storm_warning_events"), True)
        return ~pausing.any(axis=(1, 2))

    def pass_over(self, poll: Poll) -> None:
        """Nothing to keep: a poll that starts no storm leaves no trace while none is open."""

    def _pausing(self, frac: np.ndarray, warned: np.ndarray | None, first: np.ndarray | bool) -> np.ndarray:
        """Paused all poll; or, in a streak's ``first`` poll, paused at all with the firmware's
        storm warning: it can start a streak in a partly paused interval, and after that only
        intervals paused throughout continue it."""
        pausing = frac >= self.config.paused_fraction
        if warned is None:
            return pausing
        return pausing | ((warned > 0)[..., None] & (frac > 0) & first)


# Stage 2: a storm is one incident per root, the port that pauses others without being paused.

STALLED_EGRESS_HINT = (
    "A switch egress queue holds data and sends nothing without being paused (a PFC deadlock, or a "
    "stuck port): check the switch (PFC watchdog action, buffer and routing loops, the port's state); "
    "the host behind the port is a victim, not the cause."
)
_TREE_EDGES_SHOWN = 12


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    fabric, root, members = d.fabric, incident.root, group.members
    stalled = incident.evidence.get("stalled_egress") == 1 or (  # sticky, like its severity
        not fabric.is_nic(root.device)
        and any(s.kind == "pfc_pausing" and (s.device, s.port) == (root.device, root.port) for s in members)
    )
    behind = fabric.host_behind(root.device, root.port) if stalled else None
    host = behind or fabric.host_of(root.device)
    if stalled:
        incident.evidence["stalled_egress"] = 1
        incident.hint = STALLED_EGRESS_HINT
    incident.hosts.add(host)
    incident.severity = "critical"
    paused = [s for s in members if s.kind == "pfc_storm"]
    incident.evidence["paused_ports"] = len({(s.device, s.port) for s in paused})
    incident.evidence["paused_devices"] = len({s.device for s in paused})
    incident.evidence.update(_pause_tree(d, paused))
    d.jobs.attach(incident, {host}, incident.start_ns)
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    where = f"host {host}"
    if stalled:
        where = f"{f'toward host {behind}; ' if behind else ''}its egress stalled unpaused"
    incident.summary = (
        f"PFC storm on priority {root.priority} rooted at {root.device} port {root.port} "
        f"({where}): {incident.evidence['paused_ports']} ports paused on "
        f"{incident.evidence['paused_devices']} devices{job}"
    )


def _pause_tree(d: Describer, paused: list[Symptom]) -> dict[str, int | str]:
    """The propagation tree, hop by hop from the root: each paused port and the port pausing it."""
    storming = {(s.device, s.port) for s in paused}
    edges = []
    for s in paused:
        _, hops = d.roots.walk_to_root(s.device, s.port, storming)
        peer = d.fabric.peer(s.device, s.port)
        by = f"{peer[0]}:{peer[1]}" if peer else "?"
        edges.append((hops, f"{s.device}:{s.port}<-{by}"))
    edges.sort()
    shown = [f"hop {h}: {e}" for h, e in edges[:_TREE_EDGES_SHOWN]]
    if len(edges) > _TREE_EDGES_SHOWN:
        shown.append(f"+{len(edges) - _TREE_EDGES_SHOWN} more")
    return {"hops": max((h for h, _ in edges), default=0), "tree": "; ".join(shown)}


def _ripe(placement: Placement, group: Group) -> bool:
    """A storm whose pause tree ends at a switch port waits one poll: within a poll, the devices'
    snapshots arrive in any order, and a port paused by a switch whose own paused port is not in
    yet would name that switch as root. Once its symptom is in, the port re-homes and the false root
    never fires. A NIC root, the common case, fires at once, and so does a root that shows its own
    side (a switch port that stalled unpaused: ``pfc_pausing``)."""
    proven = any(m.kind == "pfc_pausing" for m in group.members)
    return proven or placement.fabric.is_nic(group.root.device)


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """SONiC's watchdog latency: the detection time plus one poll."""
    return config.pfc_storm.detection_time_s + poll_s


PFC_STORM = IncidentKind(
    name="pfc_storm",
    title="PFC storm",
    colour="tab:red",
    hint=(
        "Inspect the root NIC and its host (stalled receiver, driver or PCIe hang); enable the switch "
        "PFC watchdog and NIC pause-storm prevention so one stalled port cannot freeze the fabric."
    ),
    describe=describe,
    delay_bound_s=_delay_bound_s,
    delay="detection_time_s + 1 poll",
    carried=("stalled_egress",),
    ripe=_ripe,
    freezes_traffic=True,
)
PAUSED = SymptomKind("pfc_storm", "pfc_storm", lambda placement, key, sym: placement.storm_root(key, sym))
"""A queue the watchdog finds stormed: it joins the storm its pause tree walks back to."""
PAUSING = SymptomKind(
    "pfc_pausing", "pfc_storm", lambda placement, key, sym: RootCause(sym.device, sym.port, sym.priority)
)
"""The root's own side: a NIC that keeps pausing, or a switch egress stalled unpaused."""

_SECTION = ("pfc_storm", PfcStormConfig)
WATCHDOG = Detector(
    name="pfc_watchdog",
    symptoms=(PAUSED,),
    incidents=(PFC_STORM,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: PfcWatchdog(config.pfc_storm),
    signals=PfcWatchdog.SIGNALS,
    config=_SECTION,
)
STALLED_EGRESS = Detector(
    name="stalled_egress",
    symptoms=(PAUSING,),
    device_kinds=frozenset({"switch"}),
    make=lambda config: StalledEgress(config.pfc_storm),
    signals=StalledEgress.SIGNALS,
    config=_SECTION,
)
NIC_PAUSE_STORM = Detector(
    name="nic_pause_storm",
    symptoms=(PAUSING,),
    device_kinds=frozenset({"nic"}),
    make=lambda config: NicPauseStorm(config.pfc_storm),
    signals=NicPauseStorm.SIGNALS,
    config=_SECTION,
)


def _held(frame: CounterColumns, prios: np.ndarray) -> np.ndarray | None:
    """What each queue holds: its depth, or its watermark on a switch without a depth gauge (a
    stuck queue's data never leaves); None where neither is read."""
    held = frame.aligned("queue_occupancy_bytes", prios)
    return frame.aligned("queue_watermark_bytes", prios) if held is None else held
