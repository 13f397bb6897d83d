"""The learned outliers' section of the ``detectors:`` config (``detectors/config.py`` says where
each default comes from)."""

from __future__ import annotations

import msgspec


class OutlierConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    threshold_quantile: float = 0.9995
    persist_polls: int = 3
    window_polls: int = 4
    batch_rows: int = 4096
    top_features: int = 3
    n_estimators: int = 100
    max_samples: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold_quantile < 1.0:
            raise ValueError("threshold_quantile must be between 0 and 1 (exclusive)")
        if not 1 <= self.persist_polls <= self.window_polls <= 16:
            raise ValueError("need 1 <= persist_polls <= window_polls <= 16")
