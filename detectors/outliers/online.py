"""Stage-1 components: the online detector over batches of frames, and the collector for training."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from fabricwatch.detectors.evidence import evidence
from fabricwatch.detectors.outliers.config import OutlierConfig
from fabricwatch.detectors.outliers.features import (
    CLASSES,
    FEATURES,
    NS,
    FeatureExtractor,
    kind_of,
    port_classes,
)
from fabricwatch.detectors.outliers.model import OutlierModel
from fabricwatch.detectors.persistence import WindowPersistence
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.schemas.messages import Label, Symptom

NORMAL = frozenset({"benign", "capacity", "microbursts"})
"""Labels of healthy traffic, which training keeps: a look-alike, and the findings (a link running
hot, a queue that bursts: statistics of the traffic, not faults). Leaving their hours out left no
busy host port to learn, and then no bursty one: ECN marks at a low rate scored as outliers."""


def load_detector(path: str | Path, config: OutlierConfig | None = None) -> OutlierDetector:
    """The online detector of a model file: what every command given ``--model`` runs."""
    return OutlierDetector(OutlierModel.load(path), config)


class OutlierStage(Protocol):
    """What Stage1 drives: a frame in (symptoms of completed batches out), and a flush per tick."""

    def update(
        self, frame: RateFrame, line_Bps: np.ndarray, host_facing: np.ndarray | None
    ) -> list[Symptom]: ...

    def flush(self) -> list[Symptom]: ...


class FeatureCollector:
    """Stage-1 component that only records feature rows, for training on a baseline trace; with
    ``minutes``, only the first minutes of it."""

    def __init__(self, minutes: float | None = None) -> None:
        self.minutes = minutes
        self.first_ns: int | None = None
        self.last_ns = 0
        self._extract = FeatureExtractor()
        self._blocks: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {c: [] for c in CLASSES}

    def update(self, frame: RateFrame, line_Bps: np.ndarray, host_facing: np.ndarray | None) -> list[Symptom]:
        if self.first_ns is None:
            self.first_ns = frame.ts_ns
        if self.minutes is not None and frame.ts_ns - self.first_ns > self.minutes * 60 * NS:
            return []
        self.last_ns = max(self.last_ns, frame.ts_ns)
        X = self._extract(frame.layout, kind_of(frame), frame.values, line_Bps)
        classes = port_classes(frame, host_facing)
        begin = np.full(len(X), frame.ts_ns - int(frame.dt_s * NS))
        end = np.full(len(X), frame.ts_ns)
        for c in np.unique(classes):
            rows = classes == c
            self._blocks[CLASSES[c]].append((X[rows], begin[rows], end[rows]))
        return []

    def flush(self) -> list[Symptom]:
        return []

    def batches(self, labels: list[Label]) -> dict[str, np.ndarray]:
        """Feature rows per class, without any interval that overlaps a fault label: a baseline
        trace may hold faults, and only healthy traffic (``NORMAL``) may be learned as normal."""
        faults = [(lb.start_ns, lb.end_ns) for lb in labels if lb.kind not in NORMAL]
        out = {}
        for name, blocks in self._blocks.items():
            if not blocks:
                continue
            X, begin, end = (np.concatenate(part) for part in zip(*blocks, strict=True))
            keep = np.ones(len(X), dtype=bool)
            for lo, hi in faults:
                keep &= (end <= lo) | (begin >= hi)
            out[name] = X[keep]
        return out


@dataclass
class _Pending:
    """A frame waiting to be scored: features are extracted for the whole batch at once."""

    device: str
    ports: list[str]
    ts_ns: int
    dt_s: float
    layout: Layout
    values: np.ndarray
    line_Bps: np.ndarray
    classes: np.ndarray
    slot0: int


class OutlierDetector:
    """Stage-1 component: features, forest scores and persistence over batches of frames.

    A frame only queues its rates; features and scores are computed for the whole batch when
    ``batch_rows`` ports are waiting or the pipeline flushes (once per tick): one NIC snapshot is
    one row, and per-snapshot numpy and forest calls would cost more than the work in them."""

    def __init__(self, model: OutlierModel, config: OutlierConfig | None = None) -> None:
        self.model = model
        self.config = config or OutlierConfig()
        self.thresholds = model.thresholds(self.config.threshold_quantile)
        self._extract = FeatureExtractor()
        self._pending: dict[str, list[_Pending]] = {"nic": [], "switch": []}
        self._rows = 0
        self._slots: dict[str, tuple[list[str], int]] = {}
        self._state = WindowPersistence(self.config.persist_polls, self.config.window_polls)

    def update(self, frame: RateFrame, line_Bps: np.ndarray, host_facing: np.ndarray | None) -> list[Symptom]:
        self._pending[kind_of(frame)].append(
            _Pending(
                frame.device,
                frame.ports,
                frame.ts_ns,
                frame.dt_s,
                frame.layout,
                frame.values,
                line_Bps,
                port_classes(frame, host_facing),
                self._slot0(frame.device, frame.ports),
            )
        )
        self._rows += len(frame.ports)
        return self.flush() if self._rows >= self.config.batch_rows else []

    def flush(self) -> list[Symptom]:
        """Score everything queued; the symptoms of every port that is, or just stopped being, an
        outlier (active ones are re-emitted every poll, as the other detectors do)."""
        out: list[Symptom] = []
        for kind, frames in self._pending.items():
            if frames:
                self._pending[kind] = []
                out += self._score(kind, frames)
        self._rows = 0
        return out

    def _slot0(self, device: str, ports: list[str]) -> int:
        """First persistence slot of a device's ports; a changed port list starts afresh."""
        known = self._slots.get(device)
        if known is None or known[0] != ports:
            known = self._slots[device] = (ports, len(self._state.history))
            self._state.grow(known[1] + len(ports))
        return known[1]

    def _score(self, kind: str, frames: list[_Pending]) -> list[Symptom]:
        batch = _Batch.of(frames)
        X_all = self._features(kind, frames, batch)
        scores = np.full(len(X_all), np.nan)
        anomalous = np.zeros(len(X_all), dtype=bool)
        prepared: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for c in np.unique(batch.classes):
            model = self.model.classes.get(CLASSES[c])
            if model is None:
                continue
            rows = np.flatnonzero(batch.classes == c)
            X = model.prepare(X_all[rows])
            s, above = model.score(X)
            scores[rows] = s
            anomalous[rows] = (s > self.thresholds[CLASSES[c]]) | above
            prepared[int(c)] = (rows, X)
        out = []
        for i, active in self._persist(batch, anomalous):
            c = int(batch.classes[i])
            rows, X = prepared[c]
            out.append(self._symptom(frames, batch, i, scores[i], X[np.searchsorted(rows, i)], c, active))
        return out

    def _features(self, kind: str, frames: list[_Pending], batch: _Batch) -> np.ndarray:
        """Features of the batch in arrival order, one extraction per counter table."""
        layout = frames[0].layout
        if all(f.layout is layout for f in frames):
            return self._extract(layout, kind, *_stack(frames))
        X = np.empty((len(batch.slots), len(FEATURES[kind])))
        for group in _by_layout(frames).values():
            rows = np.concatenate([np.arange(batch.first[i], batch.first[i] + batch.sizes[i]) for i in group])
            X[rows] = self._extract(frames[group[0]].layout, kind, *_stack([frames[i] for i in group]))
        return X

    def _persist(self, batch: _Batch, anomalous: np.ndarray) -> list[tuple[int, bool]]:
        """(row, active) of every row now active or just cleared, one poll of a port at a time."""
        out = []
        for wave in _waves(batch.slots):
            now, cleared = self._state.step(
                batch.slots[wave], anomalous[wave], batch.ts[wave], batch.dt[wave]
            )
            out += [(int(i), True) for i in wave[now]] + [(int(i), False) for i in wave[cleared]]
        return out

    def _symptom(
        self, frames: list[_Pending], batch: _Batch, i: int, score: float, x: np.ndarray, c: int, active: bool
    ) -> Symptom:
        f = frames[batch.frame_of[i]]
        name = CLASSES[c]
        return Symptom(
            kind="outlier",
            device=f.device,
            port=f.ports[i - batch.first[batch.frame_of[i]]],
            ts_ns=f.ts_ns,
            start_ns=int(self._state.since_ns[batch.slots[i]]),
            active=active,
            evidence=evidence(
                score=score,
                threshold=self.thresholds[name],
                port_class=name,
                features=self.model.classes[name].deviations(x, self.config.top_features),
            ),
        )


@dataclass(frozen=True)
class _Batch:
    """Per-row bookkeeping of a batch of frames, in arrival order."""

    sizes: np.ndarray
    first: np.ndarray  # first row of each frame
    frame_of: np.ndarray
    slots: np.ndarray
    classes: np.ndarray
    ts: np.ndarray
    dt: np.ndarray

    @classmethod
    def of(cls, frames: list[_Pending]) -> _Batch:
        sizes = np.array([len(f.ports) for f in frames])
        first = np.r_[0, np.cumsum(sizes)[:-1]]
        frame_of = np.repeat(np.arange(len(frames)), sizes)
        offset = np.arange(int(sizes.sum())) - first[frame_of]
        return cls(
            sizes=sizes,
            first=first,
            frame_of=frame_of,
            slots=np.array([f.slot0 for f in frames])[frame_of] + offset,
            classes=np.concatenate([f.classes for f in frames]),
            ts=np.array([f.ts_ns for f in frames])[frame_of],
            dt=np.array([int(f.dt_s * NS) for f in frames])[frame_of],
        )


def _stack(frames: list[_Pending]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([f.values for f in frames]), np.concatenate([f.line_Bps for f in frames])


def _by_layout(frames: list[_Pending]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, f in enumerate(frames):
        groups.setdefault(id(f.layout), []).append(i)
    return groups


def _waves(slots: np.ndarray) -> list[np.ndarray]:
    """Row indices split so that no slot repeats within a wave, in arrival order: a device polled
    twice within one batch is stepped twice, its older poll first."""
    order = np.argsort(slots, kind="stable")
    ordered = slots[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    occurrence = np.empty(len(order), dtype=np.intp)
    occurrence[order] = np.arange(len(order)) - group_start
    return [np.flatnonzero(occurrence == k) for k in range(int(occurrence.max()) + 1)]
