"""Stage 1: one device's snapshots in, its rates and symptoms out. Scales with the number of devices:
everything here is keyed by device, so any partitioning of devices across workers is valid.

The detectors are the registry's (``registry.py``): each runs on the polls of the device kinds it
declares, in the registry's order. ``process_batch`` is the workers' path: rates for a batch in
stacked numpy passes, and a device's poll skipped when it carries none of the signals its kind's
detectors declare (no pause, ECN mark or CNP above zero on a NIC) while none of their streaks is
open, since for such a poll they change nothing and say nothing. A fabric has ten NIC snapshots
for every switch one, and nearly all are quiet. A kind with a detector that declares no signals
(the switch: incast and ECMP read every poll) is never skipped whole; its detectors that screen
(``spec.Screening``: incast, the PFC watchdog, the stalled egress; on a NIC, its pause storm) each
read the batch's polls of one layout in one numpy pass, and a poll they would judge for nothing
skips them while its device has no streak of theirs open: every switch marks ECN under DCQCN, few
have an incast. Paced detectors (a degrading optic, a port at the wrong speed) are given a device's
poll when they say it is due, calm or not (``paced.py``); those that judge a series of polls (a
job's rhythm) take note of every poll (``Recorder``), calm or not; a recorder that reads a batch's
polls of one layout at once (``spec.StackedRecorder``: the microburst windows) is handed each
poll's reading.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.detectors.rates import RateEngine, RateFrame
from fabricwatch.detectors.registry import REGISTRY, Registry
from fabricwatch.detectors.spec import (
    DeviceDetector,
    PacedDetector,
    Poll,
    PollStack,
    Recorder,
    Screening,
    StackedRecorder,
)
from fabricwatch.detectors.windows import WindowedDetector, WindowError
from fabricwatch.schemas.messages import Snapshot, Symptom, Topology
from fabricwatch.schemas.periods import Periods


class PeriodJudge(Protocol):
    """A detector that judges periods for the store as well as symptoms (``traffic_rhythm.py``)."""

    def take_periods(self) -> list[Periods]: ...


class Stage1:
    def __init__(
        self,
        config: DetectorConfig | None = None,
        outliers: OutlierStage | None = None,
        registry: Registry = REGISTRY,
    ) -> None:
        self.config = config or DetectorConfig()
        self.rates = RateEngine()
        self.fabric = FabricMap(None, self.config.default_link_gbps)
        self._detectors: dict[str, list[DeviceDetector]] = {"nic": [], "switch": []}
        self._paced: dict[str, list[PacedDetector]] = {"nic": [], "switch": []}
        self._recorders: dict[str, list[Recorder]] = {"nic": [], "switch": []}
        self._screening: dict[str, list[Screening]] = {"nic": [], "switch": []}
        """Detectors that screen a batch's polls of a layout at once (``spec.Screening``)."""
        self._paced_screening: dict[str, list[Screening]] = {"nic": [], "switch": []}
        """Paced detectors that screen a batch's due checks of a layout at once."""
        self._stacked_recorders: dict[str, list[tuple[int, StackedRecorder]]] = {"nic": [], "switch": []}
        """Recorders that read a batch's polls of a layout at once, with their index in ``_recorders``."""
        self._windowed: dict[str, WindowedDetector] = {}
        """Detectors that judge a device over a window, by name: their windows move with the device."""
        self._periodic: list[PeriodJudge] = []
        """Detectors that judge periods for the store (``take_periods``)."""
        for spec in registry.device:
            detector = spec.make(self.config)  # type: ignore[misc]
            for kind in spec.device_kinds:
                (self._paced if spec.paced else self._detectors)[kind].append(detector)  # type: ignore[arg-type]
                if spec.records:
                    self._recorders[kind].append(detector)  # type: ignore[arg-type]
                if isinstance(detector, Screening):
                    (self._paced_screening if spec.paced else self._screening)[kind].append(detector)
                if isinstance(detector, StackedRecorder) and spec.records:
                    self._stacked_recorders[kind].append((len(self._recorders[kind]) - 1, detector))
            if hasattr(detector, "window_state"):
                self._windowed[spec.name] = detector  # type: ignore[assignment]
            if hasattr(detector, "take_periods"):
                self._periodic.append(detector)
        self._watches = [spec.watch(self.config) for spec in registry.detectors if spec.watch is not None]
        self._outliers = outliers
        self._signals = {kind: registry.calm_signals(kind) for kind in self._detectors}
        """Per device kind, the counters a poll must show for it to be worth detecting on."""
        self._paced_next: dict[str, int] = {}
        """Per device, the soonest any paced detector is due: a poll before it asks none of them."""
        self._open: set[str] = set()
        """Devices with a streak open in one of their detectors: their every poll goes to them."""

    def set_topology(self, topology: Topology) -> None:
        self.fabric = FabricMap(topology, self.config.default_link_gbps)

    def process(self, snap: Snapshot, source: str = "") -> tuple[RateFrame | None, list[Symptom]]:
        """``source``: the input partition it was read from (the watches time a device by it)."""
        after_dark = self._seen((snap,), (source,))
        line, known = self.fabric.speeds(snap.device, snap.ports)
        frame = self.rates.update(snap, known)
        if frame is None or after_dark:
            return frame, []
        self._record(frame, line)
        return frame, self._detect(frame, line)

    def process_batch(
        self, snaps: Sequence[Snapshot], sources: Sequence[str] | None = None
    ) -> list[tuple[RateFrame | None, list[Symptom]]]:
        """``process`` of each snapshot in order, with the same results, at a fraction of the cost."""
        after_dark = self._seen(snaps, sources or [""] * len(snaps))
        speeds = [self.fabric.speeds(s.device, s.ports) for s in snaps]
        frames = self.rates.update_batch(snaps, [known for _, known in speeds])
        calm = self._calm(frames) if self._outliers is None else set()
        lines = [line for line, _ in speeds]
        recorded = [i for i, f in enumerate(frames) if f is not None and i not in after_dark]
        layouts = _by_layout(frames, recorded)
        readings, passed = self._stacked(frames, lines, layouts, calm)
        self._screen_paced(frames, lines, layouts, passed)
        out: list[tuple[RateFrame | None, list[Symptom]]] = []
        for i, (frame, line) in enumerate(zip(frames, lines, strict=True)):
            if frame is None or i in after_dark:
                out.append((frame, []))
                continue
            self._record(frame, line, readings.get(i))
            if i in calm and frame.device not in self._open:  # open: as left
                out.append((frame, self._check_paced(frame, line, passed=passed.get(i, ()))))
            else:
                out.append((frame, self._detect(frame, line, passed.get(i, ()))))
        return out

    def _record(self, frame: RateFrame, line: np.ndarray, readings: dict[int, Any] | None = None) -> None:
        """``readings``: the poll's, by recorder index, for those that read a batch at once."""
        recorders = self._recorders.get(frame.device_kind)
        if recorders:
            poll = Poll(frame, line, self.fabric)
            for k, recorder in enumerate(recorders):
                if readings is not None and k in readings:
                    recorder.record(poll, readings[k])  # type: ignore[call-arg]
                else:
                    recorder.record(poll)

    def _detect(
        self, frame: RateFrame, line: np.ndarray, passed: Collection[Screening] = ()
    ) -> list[Symptom]:
        """``passed``: the detectors whose screen passed over this poll, which judge it only if a
        streak of its device is open by now (an earlier poll of the device in the batch may have
        opened one)."""
        poll = Poll(frame, line, self.fabric)
        detectors = self._detectors.get(frame.device_kind, [])
        symptoms = _judged(detectors, poll, passed)
        symptoms += self._check_paced(frame, line, poll, passed)
        if self._signals.get(frame.device_kind) is not None:
            if any(d.open(frame.device) for d in detectors):
                self._open.add(frame.device)
            else:
                self._open.discard(frame.device)
        if self._outliers is not None:
            edge = (
                self.fabric.host_facing(frame.device, frame.ports) if frame.device_kind == "switch" else None
            )
            symptoms += self._outliers.update(frame, line, edge)
        return symptoms

    def _check_paced(
        self,
        frame: RateFrame,
        line: np.ndarray,
        poll: Poll | None = None,
        passed: Collection[Screening] = (),
    ) -> list[Symptom]:
        """The symptoms of the paced detectors for which the device is due a check (most polls:
        none, for the cost of a lookup); ``passed``, those whose screen passed over the check,
        as in ``_detect``."""
        paced = self._paced.get(frame.device_kind)
        soonest = self._paced_next.get(frame.device)
        if not paced or (soonest is not None and frame.ts_ns < soonest):
            return []  # most polls: one lookup
        due = [d for d in paced if d.due(frame.device, frame.ts_ns)]
        self._paced_next[frame.device] = min(d.next_due_ns(frame.device) or frame.ts_ns for d in paced)
        if not due:
            return []
        return _judged(due, poll or Poll(frame, line, self.fabric), passed)

    def take_periods(self) -> list[Periods]:
        """The traffic periods judged since the last call (``fabric.rhythm``, for the store)."""
        return [p for d in self._periodic for p in d.take_periods()]

    def flush(self, now_ns: int, by_source: Mapping[str, int] | None = None) -> list[Symptom]:
        """Symptoms the learned outlier detector held back for batch scoring, and those of the
        watches as the fabric's time reached ``now_ns`` (``by_source``: each input partition's
        newest time); call once per tick."""
        held = self._outliers.flush() if self._outliers is not None else []
        return held + [s for w in self._watches for s in w.sweep(now_ns, by_source)]

    def windows(self, device: str) -> dict[str, bytes]:
        """The device's windows, by detector name (``detectors/windows.py``)."""
        return {
            name: state
            for name, detector in self._windowed.items()
            if (state := detector.window_state(device)) is not None
        }

    def restore_windows(self, device: str, windows: dict[str, bytes]) -> list[str]:
        """Take the device's windows as another worker kept them; return what could not be taken
        (a detector this build lacks, a window kept under other settings), one line each."""
        refused = []
        for name, state in windows.items():
            detector = self._windowed.get(name)
            try:
                if detector is None:
                    raise WindowError("no such windowed detector here")
                detector.restore_window(device, state)
            except WindowError as exc:
                refused.append(f"{device} {name}: {exc}")
        return refused

    def forget(self, devices: Sequence[str], now_ns: int) -> list[Symptom]:
        """The watches' clears for devices another worker reads now. Their windows go too: the
        other worker keeps them, and should a device come back, the windows it is given then
        (``restore_windows``) are newer than any kept here."""
        for detector in self._windowed.values():
            for device in devices:
                detector.drop_window(device)
        return [s for w in self._watches for s in w.forget(devices, now_ns)]

    def _seen(self, snaps: Sequence[Snapshot], sources: Sequence[str]) -> set[int]:
        """Tell the watches of these polls; the indexes of those that end a dark spell of their
        device, whose rates average the spell: the detectors judge the device again from its next."""
        if len(snaps) == 1:  # ``process``: one poll, no numpy pass
            (snap,), (source,) = snaps, sources
            told = [w.seen(snap.device, snap.device_kind, snap.ts_ns, source) for w in self._watches]
            return {0} if any(told) else set()
        devices, kinds = [s.device for s in snaps], [s.device_kind for s in snaps]
        stamps = [s.ts_ns for s in snaps]
        return {i for w in self._watches for i in w.seen_many(devices, kinds, stamps, sources)}

    def _stacked(
        self,
        frames: Sequence[RateFrame | None],
        lines: Sequence[np.ndarray],
        layouts: dict[tuple[str, int, int], list[int]],
        calm: set[int],
    ) -> tuple[dict[int, dict[int, Any]], dict[int, list[Screening]]]:
        """The batch's polls of each device kind and layout (``layouts``: the recorded polls'
        indexes, ``_by_layout``) stacked once, for the recorders that
        read them at once (``spec.StackedRecorder``: per poll, its readings by recorder index) and
        the detectors that screen them (``spec.Screening``: per poll not calm, those that would
        judge it for nothing)."""
        readings: dict[int, dict[int, Any]] = {}
        passed: dict[int, list[Screening]] = {}
        for (kind, _, _), members in layouts.items():
            recorders, screening = self._stacked_recorders[kind], self._screening[kind]
            judged = [i for i in members if i not in calm] if screening else []
            if not recorders and not judged:
                continue
            stacked = members if recorders else judged  # a NIC kind's calm polls: not stacked
            stack = PollStack.of([frames[i] for i in stacked], [lines[i] for i in stacked], self.fabric)  # type: ignore[misc]
            for k, recorder in recorders:
                for i, reading in zip(members, recorder.readings(stack), strict=True):
                    readings.setdefault(i, {})[k] = reading
            if not judged:
                continue
            if len(judged) < len(stacked):
                stack = stack.only(np.array([i not in calm for i in stacked]))
            _screened(screening, stack, judged, passed)
        return readings, passed

    def _screen_paced(
        self,
        frames: Sequence[RateFrame | None],
        lines: Sequence[np.ndarray],
        layouts: dict[tuple[str, int, int], list[int]],
        passed: dict[int, list[Screening]],
    ) -> None:
        """Add to ``passed`` the paced detectors whose screen passes over a poll, stacked per
        layout. Only polls that may be due are stacked: at or past the device's due time as the
        batch begins, which a pacer's only moves later (``paced.Pacer``); the stage asks ``due``
        at each poll in order as ever."""
        for (kind, _, _), members in layouts.items():
            screening = self._paced_screening[kind]
            if not screening:
                continue
            checked = [i for i in members if self._may_be_due(frames[i], screening)]  # type: ignore[arg-type]
            if not checked:
                continue
            stack = PollStack.of([frames[i] for i in checked], [lines[i] for i in checked], self.fabric)  # type: ignore[misc]
            _screened(screening, stack, checked, passed)

    def _may_be_due(self, frame: RateFrame, screening: Sequence[Screening]) -> bool:
        """Whether the poll is at or past one of these detectors' due times for its device as
        they stand now: every poll that turns out due is one of these."""
        soonest = self._paced_next.get(frame.device)
        if soonest is not None and frame.ts_ns < soonest:
            return False  # most polls: one lookup
        for d in screening:
            due_ns = d.next_due_ns(frame.device)  # type: ignore[attr-defined]
            if due_ns is None or frame.ts_ns >= due_ns:
                return True
        return False

    def _calm(self, frames: Sequence[RateFrame | None]) -> set[int]:
        """Which frames carry none of their device kind's declared signals above zero: checked per
        layout in one numpy pass, not per frame."""
        signalled = [
            i for i, f in enumerate(frames) if f is not None and self._signals.get(f.device_kind) is not None
        ]
        calm: set[int] = set()
        for members in _by_layout(frames, signalled).values():
            first = frames[members[0]]
            assert first is not None
            signals = self._signals[first.device_kind]
            values = np.stack([frames[i].values for i in members])  # type: ignore[union-attr]
            shown = values[:, :, first.layout.columns_of(signals)]
            calm.update(members[k] for k in np.flatnonzero(~(shown > 0).any(axis=(1, 2))))
        return calm


def _screened(
    screening: Sequence[Screening],
    stack: PollStack,
    indexes: Sequence[int],
    passed: dict[int, list[Screening]],
) -> None:
    """Add each detector to ``passed`` of the polls (``indexes``, in the stack's order) its screen
    passes over."""
    for detector in screening:
        for k in np.flatnonzero(detector.screen(stack)).tolist():
            passed.setdefault(indexes[k], []).append(detector)


def _judged(detectors: Sequence[DeviceDetector], poll: Poll, passed: Collection[Screening]) -> list[Symptom]:
    """The detectors' symptoms of the poll; those whose screen passed over it (``passed``) judge
    it only if a streak of its device is open by now, and otherwise keep what they keep of it."""
    symptoms = []
    for d in detectors:
        if d in passed and not d.open(poll.frame.device):
            d.pass_over(poll)  # type: ignore[attr-defined]
        else:
            symptoms += d.update(poll)
    return symptoms


def _by_layout(
    frames: Sequence[RateFrame | None], indexes: Sequence[int]
) -> dict[tuple[str, int, int], list[int]]:
    """The indexes of these (present) frames by device kind, counter layout and port count: the
    frames whose values stack."""
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i in indexes:
        frame = frames[i]
        assert frame is not None
        groups.setdefault((frame.device_kind, id(frame.layout), frame.values.shape[0]), []).append(i)
    return groups
