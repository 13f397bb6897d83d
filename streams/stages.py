"""The two detection stages as the streaming workers run them: message bytes in, keyed bytes out.

The Faust agents stay thin: they hand these classes the values of a batch and send what comes back.
Everything that decides anything (size limits, decoding, routing symptoms to their pod, watermarks,
when stage 2 evaluates) lives here, so it is tested without a broker and matches the in-process
pipeline, which ticks stage 2 by the same ``Ticker``.
"""

from __future__ import annotations

import heapq
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fabricwatch.detectors.clock import ClockGuard
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.outliers import OutlierStage
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.detectors.stage2 import Stage2
from fabricwatch.detectors.summary import summarise_batch
from fabricwatch.schemas.messages import (
    Anomaly,
    DecodeError,
    PhaseMessage,
    Snapshot,
    Symptom,
    SymptomBatch,
    Topology,
    Watermark,
    WindowState,
    decode,
    encode,
)

log = logging.getLogger(__name__)

STAGE1_CHUNK_VALUES = 50_000
"""Counter values stage 1 takes in one ``process_batch``: a couple of thousand NIC snapshots (where
stacking pays: their per-snapshot cost is numpy's per-call cost), a handful of switch snapshots
(whose decoded values, 5,504 Python ints each, would otherwise pile up by the megabyte between
decoding and processing)."""

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""A 64-port switch snapshot with 8 priorities and 8 queues is about 41 KB; 4 MB is a broken collector."""

_MAX_STEPS = 600
"""Quiet-stretch ticks at most (a minute at 0.1 s): incidents resolve within seconds of quiet."""

SYMPTOM_BATCH_ITEMS = 2000
"""Symptoms and watermarks per ``fabric.symptoms`` message at most: about 1 MB of JSON."""

UNKNOWN_POD = "-"
"""Stage-2 key of devices the topology does not place in a pod."""


@dataclass(frozen=True)
class Keyed:
    key: bytes
    value: bytes


@dataclass(frozen=True)
class Rejected:
    """A message of the batch that goes to the dead-letter topic, and why."""

    index: int
    reason: str


@dataclass
class Stage1Output:
    rates: list[Keyed] = field(default_factory=list)
    periods: list[Keyed] = field(default_factory=list)
    """``fabric.rhythm``: each NIC's traffic period where the rhythm detector judged one."""
    symptoms: list[Keyed] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    values: int = 0
    clock_drops: list[str] = field(default_factory=list)
    """Snapshots held as ahead of the fabric's time and then displaced by their device's next."""


def check_size(value: bytes | None, limit: int) -> str | None:
    """The dead-letter reason for an empty or oversized message, or None."""
    if not value:
        return "empty message"
    if len(value) > limit:
        return f"oversized: {len(value)} bytes > limit {limit}"
    return None


class Stage1Worker:
    """Stage 1 over a batch of ``fabric.counters`` values: rates and symptoms keyed for their topics.

    After each batch it sends, to every pod, one watermark per input partition it read: the newest
    snapshot time taken from that partition. Symptoms and watermarks of a pod share a partition of
    ``fabric.symptoms`` and leave in order, so a watermark follows every symptom it covers. Between
    batches, ``heartbeat`` says which of its partitions are caught up (nothing left to read), so
    stage 2 does not wait for partitions whose devices are quiet.
    With ``rates``, the batch's frames also go out as ``fabric.rates`` messages for storage (a
    ``RatesBatch`` per input partition), with utilisation against the line rates stage 1 itself
    judged by.
    """

    def __init__(
        self,
        config: DetectorConfig,
        outliers: OutlierStage | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        rates: bool = True,
    ) -> None:
        self.core = Stage1(config, outliers)
        self.max_message_bytes = max_message_bytes
        self.rates = rates
        self._pods: dict[str, str] = {}
        self._pod_keys: list[bytes] = [UNKNOWN_POD.encode()]
        self._newest: dict[str, int] = {}
        self.clock: ClockGuard[tuple[Snapshot, str, int]] = ClockGuard()
        self._source_of: dict[str, str] = {}
        """The input partition each device's snapshots came from."""
        self._handed: list[Symptom] = []
        """Clears for devices whose partitions went to another worker, sent with the next output."""

    def keep_sources(self, sources: set[str]) -> None:
        """After a rebalance, the partitions this worker reads: its devices on others stop being
        timed here (``silence``), and what it reported dark about them is cleared."""
        gone = [d for d, source in self._source_of.items() if source not in sources]
        for device in gone:
            del self._source_of[device]
        self._handed += self.core.forget(gone, self.clock.now_ns)

    def windows(self, sources: set[str]) -> list[tuple[int, Keyed]]:
        """The detector windows of every device read from ``sources`` (input partitions), each
        keyed by its device for ``fabric.state`` with the number of its counters partition."""
        out = []
        for device, source in self._source_of.items():
            if source in sources and (windows := self.core.windows(device)):
                message = WindowState(device, self.clock.now_ns, windows)
                out.append((int(source.rsplit("/", 1)[1]), Keyed(device.encode(), encode(message))))
        return out

    def restore_windows(self, states: Iterable[WindowState]) -> tuple[int, list[str]]:
        """Take the windows another worker kept for devices this one keeps none for yet (one it
        reads already keeps its own, newer); how many devices it took, and what it refused."""
        taken, refused = 0, []
        for state in states:
            if self.core.windows(state.device):
                continue
            refused += self.core.restore_windows(state.device, state.windows)
            taken += 1
        return taken, refused

    def set_topology(self, topology: Topology) -> None:
        self.core.set_topology(topology)
        self._pods = {d.id: d.pod or UNKNOWN_POD for d in topology.devices}
        self._pod_keys = sorted({p.encode() for p in self._pods.values()} | {UNKNOWN_POD.encode()})

    def process(self, values: Sequence[bytes | None], sources: Sequence[str]) -> Stage1Output:
        """``sources[i]`` names the input partition of ``values[i]`` (e.g. ``fabric.counters/3``).

        A snapshot stamped too far ahead of the fabric's time is held (``ClockGuard``, as in the
        in-process pipeline) and processed in a later batch when other devices confirm the time;
        if its device's next snapshot displaces it, it is rejected with the reason."""
        batch = _Batch()
        taken: list[tuple[Snapshot, str, int]] = []
        pending = 0
        for i, value in enumerate(values):
            if pending >= STAGE1_CHUNK_VALUES:
                self._run(taken, batch)
                taken, pending = [], 0
            reason = check_size(value, self.max_message_bytes)
            if reason is None:
                try:
                    snap = decode(value, Snapshot)  # type: ignore[arg-type]
                except DecodeError as exc:
                    reason = str(exc)
            if reason is not None:
                batch.out.rejected.append(Rejected(i, reason))
                continue
            if not self.clock.ahead(snap.ts_ns):
                self.clock.seen(snap.device, snap.ts_ns)
                taken.append((snap, sources[i], i))
                pending += len(snap.ports) * len(snap.counters)
                continue
            released, dropped = self.clock.hold(snap.device, snap.ts_ns, (snap, sources[i], i))
            if dropped is not None:
                # Its message may be from an earlier batch, already acknowledged: count it only.
                batch.out.clock_drops.append(self.clock.reason(snap.device))
            for _, (held, source, index) in released:
                self.clock.seen(held.device, held.ts_ns)
                taken.append((held, source, index))
                pending += len(held.ports) * len(held.counters)
        self._run(taken, batch)
        for source, ts_ns in batch.newest.items():
            self._newest[source] = max(self._newest.get(source, 0), ts_ns)
        for symptom in self._take_handed() + self.core.flush(self.clock.now_ns, self._newest):
            batch.add_symptom(self._pod(symptom), symptom)
        for source in sorted(batch.newest):
            batch.add_mark(self._pod_keys, Watermark(source, self._newest[source]))
        batch.out.rates = self._rates(batch.frames)
        batch.out.periods = self._periods()
        batch.out.symptoms = _symptom_messages(batch.items)
        return batch.out

    def _run(self, taken: list[tuple[Snapshot, str, int]], batch: _Batch) -> None:
        results = self._processed([t[0] for t in taken], [t[1] for t in taken])
        for (snap, source, index), result in zip(taken, results, strict=True):
            self._take(snap, source, index, result, batch)

    def _processed(
        self, snaps: list[Snapshot], sources: list[str]
    ) -> list[tuple[RateFrame | None, list[Symptom]] | Exception]:
        """Stage 1 of the batch in one call; should that fail (a bug, not bad input: snapshots are
        checked when decoded), one snapshot at a time, so that the one that fails is set aside with
        its reason. Snapshots the failed call had already folded into the rate state come back as
        duplicates there: counted, and not processed twice."""
        try:
            return list(self.core.process_batch(snaps, sources))
        except Exception:  # a worker never dies on input
            log.exception("stage 1 failed on a batch of %d; processing it one snapshot at a time", len(snaps))
        results: list[tuple[RateFrame | None, list[Symptom]] | Exception] = []
        for snap, source in zip(snaps, sources, strict=True):
            try:
                results.append(self.core.process(snap, source))
            except Exception as exc:
                results.append(exc)
        return results

    def _take(
        self,
        snap: Snapshot,
        source: str,
        index: int,
        result: tuple[RateFrame | None, list[Symptom]] | Exception,
        batch: _Batch,
    ) -> None:
        if isinstance(result, Exception):  # the snapshot is set aside, the worker goes on
            batch.out.rejected.append(Rejected(index, f"processing failed: {result!r}"))
            return
        frame, symptoms = result
        batch.out.values += len(snap.ports) * len(snap.counters)
        batch.newest[source] = max(batch.newest.get(source, 0), snap.ts_ns)
        self._source_of[snap.device] = source
        if frame is not None and self.rates:
            batch.frames[source].append(frame)
        for symptom in symptoms:
            batch.add_symptom(self._pod(symptom), symptom)

    def _rates(self, frames: dict[str, list[RateFrame]]) -> list[Keyed]:
        """The storage messages of a batch: one per input partition (or more, of ``RATES_BATCH_ROWS``
        each), keyed by it. A device's snapshots come from one partition, so its rates stay in
        order on one partition of ``fabric.rates`` (``docs/streaming.md``)."""
        out: list[Keyed] = []
        speeds = self.core.fabric.port_speeds_bps
        for source, taken in sorted(frames.items()):
            lines = [speeds(f.device, f.ports) for f in taken]
            out += [Keyed(source.encode(), encode(m)) for m in summarise_batch(taken, lines)]
        return out

    def _periods(self) -> list[Keyed]:
        """The traffic periods judged in the batch (``fabric.rhythm``), with the rates: for the store."""
        periods = self.core.take_periods()
        return [Keyed(p.devices[0].encode(), encode(p)) for p in periods] if self.rates else []

    def heartbeat(self, caught_up: Mapping[str, bool]) -> list[Keyed]:
        """Watermarks of the partitions this worker owns, each saying whether it is caught up: one
        message per pod."""
        batch = _Batch()
        for symptom in self._take_handed():
            batch.add_symptom(self._pod(symptom), symptom)
        for source, done in sorted(caught_up.items()):
            batch.add_mark(self._pod_keys, Watermark(source, self._newest.get(source, 0), done))
        return _symptom_messages(batch.items)

    def _take_handed(self) -> list[Symptom]:
        handed, self._handed = self._handed, []
        return handed

    def _pod(self, symptom: Symptom) -> bytes:
        return self._pods.get(symptom.device, UNKNOWN_POD).encode()


@dataclass
class _Batch:
    """What one ``process`` gathers before it is encoded: per input partition its frames and newest
    time, per pod (its ``fabric.symptoms`` key) its symptoms and watermarks in sending order."""

    out: Stage1Output = field(default_factory=Stage1Output)
    newest: dict[str, int] = field(default_factory=dict)
    frames: defaultdict[str, list[RateFrame]] = field(default_factory=lambda: defaultdict(list))
    items: defaultdict[bytes, list[Symptom | Watermark]] = field(default_factory=lambda: defaultdict(list))

    def add_symptom(self, pod: bytes, symptom: Symptom) -> None:
        self.items[pod].append(symptom)

    def add_mark(self, pods: Sequence[bytes], mark: Watermark) -> None:
        for pod in pods:
            self.items[pod].append(mark)


def _symptom_messages(items: Mapping[bytes, list[Symptom | Watermark]]) -> list[Keyed]:
    """One ``SymptomBatch`` per pod (more past ``SYMPTOM_BATCH_ITEMS``), its items in order."""
    return [
        Keyed(pod, encode(SymptomBatch(its[i : i + SYMPTOM_BATCH_ITEMS])))
        for pod, its in sorted(items.items())
        for i in range(0, len(its), SYMPTOM_BATCH_ITEMS)
    ]


@dataclass
class _Mark:
    """What stage 2 knows of one input partition: its watermark, and when it last moved and was
    last heard of (wall seconds)."""

    ts_ns: int
    moved: float
    heard: float
    caught_up: bool

    def update(self, mark: Watermark, now: float) -> None:
        if mark.ts_ns > self.ts_ns:
            self.ts_ns, self.moved = mark.ts_ns, now
        self.heard = now
        self.caught_up = mark.caught_up


class Stage2Worker:
    """Stage 2 over the symptom stream of its pods, in event-time order.

    Stage-1 workers run at their own pace, and after a backlog one input partition can be minutes
    ahead of another. Taking symptoms in arrival order would then resolve incidents early and miss
    others (a symptom far behind the incidents' clock has expired when it arrives), so symptoms
    wait (bounded by ``max_held``) until the watermark of every input partition that still has
    input has passed them, and are taken in time order. A partition whose worker said within
    ``heartbeat_s`` that it is caught up does not hold the others back; nor does one whose
    watermark has not moved for ``stall_after_s`` (its worker died and the group has not yet moved
    it; set it above the session timeout so that a takeover loses nothing). A dead worker's
    partitions stop being "caught up" when its heartbeats stop, so stage 2 waits for the takeover.
    Symptoms that arrive behind the released time are taken at once. When no input is left, time
    moves on to the newest watermark, so the incidents of a finished input still resolve.

    Each symptoms partition waits, for up to ``startup_wait_s`` from its first message, until it
    has heard a watermark from each of ``expected_sources`` (the input partitions). Stage 1 sends
    watermarks to the pods it knows: one that has not read the topology yet sends them to the
    unknown pod's partition only, so a source heard on one partition says nothing of where it is
    on another. Found through two workers: a NIC's retransmissions fired alone, their link's
    symptoms still on their way from a worker that had just read the topology.

    "Caught up" is true of the moment the worker asked the broker, not after: a producer sends
    each partition's records in its own batches, so one partition can be read to its end while the
    records that follow it in time are still on their way, and other partitions have moved past
    them. So stage 2 reads a caught-up partition's watermark as moving on with the wall clock from
    when it last moved (live, about where its devices' next records will be stamped), up to the
    newest watermark, and not as the newest watermark at once. One caught up and unmoved for
    ``quiet_after_s`` (its devices stopped sending) holds nothing back: a replay faster than real
    time pays that once, not the replay's pace.

    Projected time is right for taking symptoms and resolving incidents, not for concluding that
    evidence is absent: a new incident that waits for another's symptoms (``Correlator._ripe``)
    waits in settled time, the slowest input's own watermark, where a caught-up partition counts
    until it has been quiet for ``settle_after_s``.
    """

    def __init__(
        self,
        config: DetectorConfig,
        tick_s: float = 0.02,
        stall_after_s: float = 30.0,
        heartbeat_s: float = 2.0,
        quiet_after_s: float = 2.0,
        settle_after_s: float = 10.0,
        startup_wait_s: float = 5.0,
        max_held: int = 200_000,
        expected_sources: Sequence[str] = (),
        step_s: float = 0.1,
    ) -> None:
        self.expected_sources = tuple(expected_sources)
        self._channels: set[str] = set()
        """The symptoms partitions read."""
        self._awaiting: dict[str, float] = {}
        """Those still waiting for a watermark from each input partition, with when their first
        message came (wall seconds)."""
        self.core = Stage2(config, tick_s)
        self.stall_after_s = stall_after_s
        self.heartbeat_s = heartbeat_s
        self.quiet_after_s = quiet_after_s
        self.settle_after_s = settle_after_s
        self.startup_wait_s = startup_wait_s
        self.max_held = max_held
        self._marks: dict[tuple[str, str], _Mark] = {}
        self._held: list[tuple[int, int, Symptom]] = []
        self._seq = 0
        self._released_ns = 0
        self._settled_ns = 0
        self._step_ns = int(step_s * 1e9)
        self._unevaluated = False
        self.taken = 0
        """Symptoms and watermarks taken, whether they came alone or in batches."""

    def set_topology(self, topology: Topology) -> None:
        self.core.set_topology(topology)

    def on_phase(self, phase: PhaseMessage) -> None:
        self.core.on_phase(phase)

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def channels(self) -> frozenset[str]:
        """The symptoms partitions heard from: those without a pod never are."""
        return frozenset(self._channels)

    @property
    def released_ns(self) -> int:
        """How far in event time this stage 2 has judged (0: not yet started)."""
        return self._released_ns

    def hand_over(self, lost: set[str], owns: Callable[[str], bool]) -> int:
        """Forget what came from symptoms partitions another worker reads now (``lost``): their
        watermarks, which would hold every other pod back until they stall, and held symptoms of
        devices no longer ours, which would fire here what the new owner carries on. Then the
        correlator's incidents of those devices (``Correlator.release``)."""
        self._marks = {k: m for k, m in self._marks.items() if k[0] not in lost}
        self._channels -= lost
        self._awaiting = {c: t for c, t in self._awaiting.items() if c not in lost}
        self._held = [h for h in self._held if owns(h[2].device)]
        heapq.heapify(self._held)
        return self.core.correlator.release(owns)

    def feed(self, value: bytes | None, now: float, channel: str = "") -> tuple[list[Anomaly], str | None]:
        """One ``fabric.symptoms`` message in (a symptom, a watermark or a ``SymptomBatch`` of
        them); the anomaly events it released and a dead-letter reason out.

        ``now`` is wall seconds; ``channel`` the symptoms partition it came from: a watermark
        follows the symptoms it covers only within its own partition, so each partition's
        watermarks count on their own. A batch's items are taken one by one, as if each had come
        on its own."""
        reason = check_size(value, DEFAULT_MAX_MESSAGE_BYTES)
        if reason is not None:
            return [], reason
        try:
            msg = decode(value, Symptom | Watermark | SymptomBatch)  # type: ignore[arg-type]
        except DecodeError as exc:
            return [], str(exc)
        if not isinstance(msg, SymptomBatch):
            return self._feed(msg, now, channel), None
        fired: list[Anomaly] = []
        for item in msg.items:
            fired += self._feed(item, now, channel)
        return fired, None

    def _feed(self, msg: Symptom | Watermark, now: float, channel: str) -> list[Anomaly]:
        self.taken += 1
        if channel not in self._channels:
            self._channels.add(channel)
            self._awaiting[channel] = now
        if isinstance(msg, Watermark):
            key = (channel, msg.source)
            mark = self._marks.get(key)
            if mark is None:
                self._marks[key] = _Mark(msg.ts_ns, now, now, msg.caught_up)
            else:
                mark.update(msg, now)
            return self.advance(now)
        if msg.ts_ns <= self._released_ns:
            return self._take(msg.ts_ns, msg)
        heapq.heappush(self._held, (msg.ts_ns, self._seq, msg))
        self._seq += 1
        return self.advance(now)

    def advance(self, now: float) -> list[Anomaly]:
        """Take every held symptom the watermarks have passed; call also on a timer when idle."""
        if not self._marks or self._unheard(now):
            return []
        newest = max(m.ts_ns for m in self._marks.values())
        passed = [p for m in self._marks.values() if (p := self._passed(m, now)) is not None]
        until = min([newest, *passed])
        settled = min([newest, *(m.ts_ns for m in self._marks.values() if self._settling(m, now))])
        fired: list[Anomaly] = []
        if settled != self._settled_ns:
            self._settled_ns = settled
            if self.core.correlator.waiting and self._released_ns:
                fired += self.core.evaluate_now(settled)
        while self._held and (self._held[0][0] <= until or len(self._held) > self.max_held):
            ts_ns, _, symptom = heapq.heappop(self._held)
            fired += self._take(ts_ns, symptom)
        if until > self._released_ns:
            fired += self._take(until, None)
        if (
            self._unevaluated
            and not self._held
            and all(m.caught_up and now - m.heard < self.heartbeat_s for m in self._marks.values())
        ):
            # Every input is read to its end: this poll's burst is complete, so evaluate it now
            # rather than when the next poll's first record arrives, a poll interval later.
            fired += self.core.evaluate_now(self._settled_ns)
            self._unevaluated = False
        return fired

    def _unheard(self, now: float) -> bool:
        """Whether a symptoms partition, within ``startup_wait_s`` of its first message, still
        lacks a watermark from one of the input partitions: its symptoms may be on their way."""
        for channel, first in list(self._awaiting.items()):
            if now - first >= self.startup_wait_s or all(
                (channel, source) in self._marks for source in self.expected_sources
            ):
                del self._awaiting[channel]
        return bool(self._awaiting)

    def _passed(self, mark: _Mark, now: float) -> int | None:
        """How far in event time one input partition is known to be complete; None if it holds
        nothing back (stalled, or caught up and quiet)."""
        idle_s = now - mark.moved
        if not (mark.caught_up and now - mark.heard < self.heartbeat_s):
            return mark.ts_ns if idle_s < self.stall_after_s else None
        if mark.ts_ns == 0 or idle_s >= self.quiet_after_s:
            return None
        return mark.ts_ns + int(idle_s * 1e9)

    def _settling(self, mark: _Mark, now: float) -> bool:
        """Whether one input partition's own watermark bounds the settled time: unless it has
        stalled, or been caught up and quiet for ``settle_after_s`` (its devices stopped)."""
        idle_s = now - mark.moved
        if mark.ts_ns == 0:
            return False
        if mark.caught_up and now - mark.heard < self.heartbeat_s:
            return idle_s < self.settle_after_s
        return idle_s < self.stall_after_s

    def _take(self, ts_ns: int, symptom: Symptom | None) -> list[Anomaly]:
        """Move time to ``ts_ns`` (through a tick every ``step_s`` of a quiet stretch, so quiet
        incidents resolve on time, as between the snapshots of an in-process replay), then take
        the symptom."""
        fired: list[Anomaly] = []
        if self._released_ns:
            # Past the longest resolution wait, more steps change nothing: a jump of hours (a
            # collector back after an outage) is the same as a jump of a minute.
            last = min(ts_ns, self._released_ns + _MAX_STEPS * self._step_ns)
            for t in range(self._released_ns + self._step_ns, last, self._step_ns):
                fired += self._tick_at(t)
        fired += self._tick_at(ts_ns)
        if symptom is not None:
            self.core.on_symptom(symptom)
            self._unevaluated = True
        self._released_ns = max(self._released_ns, ts_ns)
        return fired

    def _tick_at(self, ts_ns: int) -> list[Anomaly]:
        due = self.core.due(ts_ns)
        self.core.seen(ts_ns)
        if due is None:
            return []
        self._unevaluated = False
        return self.core.evaluate(due, self._settled_ns)
