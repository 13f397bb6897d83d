"""An IsolationForest per port class, scored from the fitted trees' own arrays."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.outliers.config import OutlierConfig
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


class Forest:
    """A fitted IsolationForest reduced to what scoring needs: its trees (scikit-learn's ``Tree``,
    whose ``apply`` runs in C) and ``max_samples``. Scores are 2^(-mean path length / c(max_samples)),
    the same numbers as ``score_samples`` without its milliseconds of per-call overhead.

    It is stored as arrays (``arrays`` / ``from_arrays``), never as a pickle: a model file is data
    and loading one runs no code of the file's."""

    def __init__(self, trees: list, max_samples: int, n_features: int) -> None:
        self.trees = trees
        self.max_samples = max_samples
        self.n_features = n_features
        self._depths = [_leaf_depths(t) for t in trees]
        self._norm = len(trees) * float(_average_path_length(np.array([max_samples]))[0])

    @classmethod
    def of(cls, forest) -> Forest:
        """From a fitted ``sklearn.ensemble.IsolationForest``."""
        return cls(
            [e.tree_ for e in forest.estimators_], int(forest.max_samples_), int(forest.n_features_in_)
        )

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float32)
        depth = np.zeros(len(X))
        for tree, leaf_depth in zip(self.trees, self._depths, strict=True):
            depth += leaf_depth[tree.apply(X)]
        return 2.0 ** (-depth / self._norm)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Every tree's node table and values, plus the sizes, as plain arrays named under ``prefix``."""
        out = {
            f"{prefix}/shape": np.array([len(self.trees), self.max_samples, self.n_features], dtype=np.int64),
            f"{prefix}/max_depth": np.array([t.max_depth for t in self.trees], dtype=np.int64),
        }
        for i, tree in enumerate(self.trees):
            state = tree.__getstate__()
            out[f"{prefix}/{i}/nodes"] = state["nodes"]
            out[f"{prefix}/{i}/values"] = state["values"]
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> Forest:
        """The forest stored by ``arrays``; ValueError when its trees are not well formed (a child
        out of range or not after its parent, a feature beyond the model's), so that a damaged or
        crafted file is refused before any tree is walked."""
        from sklearn.tree._tree import Tree

        n_trees, max_samples, n_features = (int(x) for x in arrays[f"{prefix}/shape"])
        depths = arrays[f"{prefix}/max_depth"]
        trees = []
        for i in range(n_trees):
            nodes, values = arrays[f"{prefix}/{i}/nodes"], arrays[f"{prefix}/{i}/values"]
            _check_nodes(nodes, n_features, f"{prefix} tree {i}")
            tree = Tree(n_features, np.ones(1, dtype=np.intp), 1)
            tree.__setstate__(
                {"max_depth": int(depths[i]), "node_count": len(nodes), "nodes": nodes, "values": values}
            )
            trees.append(tree)
        return cls(trees, max_samples, n_features)


def _check_nodes(nodes: np.ndarray, n_features: int, what: str) -> None:
    if nodes.dtype.names is None or not {"left_child", "right_child", "feature"} <= set(nodes.dtype.names):
        raise ValueError(f"{what}: not a node table")
    index = np.arange(len(nodes))
    for side in ("left_child", "right_child"):
        child = nodes[side]
        bad = (child != -1) & ((child <= index) | (child >= len(nodes)))
        if bad.any():
            raise ValueError(f"{what}: node {int(np.argmax(bad))} has a {side} out of range")
    inner = nodes["left_child"] != -1
    if ((nodes["feature"][inner] < 0) | (nodes["feature"][inner] >= n_features)).any():
        raise ValueError(f"{what}: a split on a feature the model does not have")


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
    forest: Forest

    def prepare(self, X_all: np.ndarray) -> np.ndarray:
        """This model's columns of a full feature matrix, unknown values at the baseline median."""
        X = X_all[:, self.columns]
        return np.where(np.isnan(X), self.median, X)

    def score(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Forest scores of prepared rows (0.5 unremarkable, towards 1 isolated) and whether a health
        feature rose above anything the baseline saw."""
        above = (X[:, self.health] > self.ceiling[self.health]).any(axis=1)
        return self.forest(X), above

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
    forest = Forest.of(
        IsolationForest(
            n_estimators=config.n_estimators,
            max_samples=min(config.max_samples, len(X)),
            random_state=config.seed,
        ).fit(X.astype(np.float32))
    )
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
