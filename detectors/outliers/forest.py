"""An IsolationForest per port class, scored from the fitted trees' own arrays."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.config import OutlierConfig
from fabricwatch.detectors.outliers.features import FEATURES

KIND_OF_CLASS = {"nic": "nic", "host_facing": "switch", "fabric": "switch"}
QUANTILE_LEVELS = np.unique(np.r_[np.linspace(0.0, 0.99, 100), np.linspace(0.99, 1.0, 1001)])


def _average_path_length(n: np.ndarray) -> np.ndarray:
    """Expected depth at which a point is isolated among ``n`` (Liu et al. 2008, c(n))."""
    n = np.asarray(n, dtype=np.float64)
    out = np.zeros_like(n)
    out[n == 2] = 1.0
    big = n > 2
    out[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return out


def _leaf_depths(tree) -> np.ndarray:
    """Node depth plus c(samples in the node), for every node; children come after their parent."""
    left, right = tree.children_left, tree.children_right
    depth = np.zeros(tree.node_count)
    inner = np.flatnonzero(left >= 0)
    for _ in range(tree.max_depth):
        depth[left[inner]] = depth[inner] + 1
        depth[right[inner]] = depth[inner] + 1
    return depth + _average_path_length(tree.n_node_samples)


class _ForestScorer:
    """IsolationForest scores from the trees' arrays: 2^(-mean path length / c(max_samples))."""

    def __init__(self, forest) -> None:
        self._trees = [(est.tree_, _leaf_depths(est.tree_)) for est in forest.estimators_]
        self._norm = len(self._trees) * float(_average_path_length(np.array([forest.max_samples_]))[0])

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float32)
        depth = np.zeros(len(X))
        for tree, leaf_depth in self._trees:
            depth += leaf_depth[tree.apply(X)]
        return 2.0 ** (-depth / self._norm)


@dataclass
class ClassModel:
    """One port class: its features, baseline statistics, forest and forest-score distribution."""

    features: list[str]
    units: list[str]
    columns: np.ndarray  # of each feature in FEATURES[kind]
    health: np.ndarray  # bool per feature
    median: np.ndarray  # stands in for unknown values
    spread: np.ndarray  # interquartile range, else full range, on the baseline (evidence only)
    ceiling: np.ndarray  # maximum on the baseline
    score_quantiles: np.ndarray  # forest scores on the baseline at QUANTILE_LEVELS
    rows: int
    forest: object

    def __post_init__(self) -> None:
        self._scorer = _ForestScorer(self.forest)

    def prepare(self, X_all: np.ndarray) -> np.ndarray:
        """This model's columns of a full feature matrix, unknown values at the baseline median."""
        X = X_all[:, self.columns]
        return np.where(np.isnan(X), self.median, X)

    def score(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Forest scores of prepared rows (0.5 unremarkable, towards 1 isolated) and whether a health
        feature rose above anything the baseline saw."""
        above = (X[:, self.health] > self.ceiling[self.health]).any(axis=1)
        return self._scorer(X), above

    def threshold(self, quantile: float) -> float:
        return float(np.interp(quantile, QUANTILE_LEVELS, self.score_quantiles))

    def deviations(self, x: np.ndarray, top: int) -> str:
        """Health features above the baseline first, then the features furthest from the baseline
        median in interquartile ranges, in their own units: the evidence a person reads."""
        above = np.where(self.health & (x > self.ceiling), x - self.ceiling, 0.0)
        gap = np.abs(x - self.median)
        with np.errstate(divide="ignore", invalid="ignore"):
            far = np.where(gap > 0, gap / self.spread, 0.0)
        rank = np.lexsort((-far, -above))
        picked = [int(j) for j in rank[:top] if above[j] > 0 or far[j] > 0]
        return ", ".join(self._describe(j, x[j], above[j] > 0) for j in picked)

    def _describe(self, j: int, value: float, above: bool) -> str:
        ref = self.ceiling[j] if above else self.median[j]
        what = "baseline max" if above else "baseline median"
        return f"{self.features[j]} {math.expm1(value):.3g} {self.units[j]} ({what} {math.expm1(ref):.3g})"


def fit_class(X_all: np.ndarray, kind: str, config: OutlierConfig) -> ClassModel:
    """Fit one class on its baseline rows (the full feature matrix of its device kind)."""
    from sklearn.ensemble import IsolationForest

    defs = FEATURES[kind]
    keep = np.flatnonzero(~np.isnan(X_all).all(axis=0))
    X = X_all[:, keep]
    median = np.nanmedian(X, axis=0)
    X = np.where(np.isnan(X), median, X)
    q25, q75 = np.percentile(X, [25, 75], axis=0)
    forest = IsolationForest(
        n_estimators=config.n_estimators,
        max_samples=min(config.max_samples, len(X)),
        random_state=config.seed,
    ).fit(X.astype(np.float32))
    model = ClassModel(
        features=[defs[j].name for j in keep],
        units=[defs[j].unit_name for j in keep],
        columns=keep,
        health=np.array([defs[j].health for j in keep], dtype=bool),
        median=median,
        spread=np.where(q75 > q25, q75 - q25, X.max(axis=0) - X.min(axis=0)),
        ceiling=X.max(axis=0),
        score_quantiles=np.zeros(0),
        rows=len(X),
        forest=forest,
    )
    model.score_quantiles = np.quantile(model.score(X)[0], QUANTILE_LEVELS)
    return model
