"""Fit the learned outlier model from baseline traces, replayed through the same pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.outliers import FeatureCollector, OutlierModel
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace


def train_outliers(traces: list[Path], config: DetectorConfig, minutes: float | None = None) -> OutlierModel:
    """Replay baseline traces through the pipeline, collecting features per port class (intervals a
    fault label covers left out), and fit the model on them."""
    parts: dict[str, list[np.ndarray]] = {}
    first, last = [], []
    for trace in traces:
        collector = FeatureCollector(minutes)
        result = replay_trace(trace, Pipeline(config, outliers=collector))
        for name, X in collector.batches(result.pipeline.labels).items():
            parts.setdefault(name, []).append(X)
        if collector.first_ns is not None:
            first.append(collector.first_ns)
            last.append(collector.last_ns)
    batches = {name: np.concatenate(blocks) for name, blocks in parts.items()}
    return OutlierModel.fit(batches, config.outliers, (min(first, default=0), max(last, default=0)))
