"""Learned outliers: one unsupervised model per port class, trained on baseline traffic.

The rule detectors know three failure modes; a link that corrupts packets, a NIC that silently
runs at half its rate, or anything else nobody wrote a rule for, only shows as a port whose
counters no longer look like they did while the fabric was healthy.

* **Features** are ratios, never load itself: training load changes all the time, and a model
  that learned the baseline's load levels would page on every new job. Errors, retransmissions,
  discards, ECN marks and CNPs are counted per packet (ppm), pauses as a share of the time, queue
  occupancy as the delay it adds at line rate, each in whole units (a fraction of a ppm or of a
  microsecond is noise, not a signal) and through ``log1p`` so that decades weigh alike.
* **Health features** should stay at their baseline level whatever the load: errors and
  retransmissions, and a switch port's queue weighted by the share of the interval its line was
  idle, neither sending nor paused (``queue_delay*idle_tx``). A work-conserving port only queues
  while it sends at line rate, so a standing queue on a half-idle line means the link carries less
  than its rate: that is how a NIC whose bandwidth silently halved shows, at the leaf port in front
  of it. A health feature above anything the baseline saw makes a port anomalous by itself.
* **Load-shaped features** (ECN, CNPs, pauses, queue delay, drops) move with congestion, which is
  normal in training; only their combination is judged, by an IsolationForest per port class
  (``nic``, ``host_facing``, ``fabric``), scored here from the fitted trees' own arrays (the same
  numbers as ``score_samples`` without its milliseconds of per-call overhead, which would dominate
  stage 1 at one batch per poll). No scaler: a forest's splits are drawn between each feature's
  minimum and maximum, so it is invariant to per-feature scaling. A forest cannot extrapolate
  (a value beyond the baseline scores like the baseline's extreme) nor split on a feature that
  never moved: that is why health features are also checked against the baseline's maximum.
* **Threshold**: the configured quantile of the forest's scores on the baseline, per class.
* **Persistence**: a port is an outlier once ``persist_polls`` of its last ``window_polls`` polls
  were anomalous, and clears after a whole window without one (Netdata's lesson: single scores are
  noisy, nothing pages on one of them).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from fabricwatch.detectors.config import OutlierConfig
from fabricwatch.detectors.evidence import evidence
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.schemas.messages import Label, Symptom

FORMAT = "fabricwatch-outliers"
FORMAT_VERSION = 1
CLASSES = ("nic", "host_facing", "fabric")
_KIND_OF_CLASS = {"nic": "nic", "host_facing": "switch", "fabric": "switch"}
# Fine in the top percent, where thresholds live.
_QUANTILE_LEVELS = np.unique(np.r_[np.linspace(0.0, 0.99, 100), np.linspace(0.99, 1.0, 1001)])
_NS = 1_000_000_000


class ModelError(ValueError):
    """A model file that cannot be used here; the message names the problem and what to do."""


# --- features -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Feature:
    """``counters`` (summed over priorities/queues) per ``per``, times ``unit``; with ``idle`` (``tx``
    or ``rx``) also times the share of the interval that direction neither carried traffic nor was
    paused; then log1p."""

    name: str
    counters: tuple[str, ...]
    per: str  # "rx_packets" | "tx_packets" | "line" (bytes/s of line rate) | "second"
    unit: float
    unit_name: str
    health: bool = False
    idle: str = ""


_PPM, _US_OF_LINE = 1e6, 1e6
_PAUSED_PCT = 1e-4  # microseconds paused per second -> percent of the time
_US = 1e-6  # microseconds paused per second -> share of the time
# Per direction: the bytes it carries and the pause that stops it (a peer pausing us stops our tx).
_DIRECTION = {"tx": ("tx_bytes", "rx_pfc_duration_us"), "rx": ("rx_bytes", "tx_pfc_duration_us")}


def _ppm(counter: str, per: str, health: bool = False, idle: str = "") -> Feature:
    name = f"{counter}/{per}" + (f"*idle_{idle}" if idle else "")
    return Feature(name, (counter,), per, _PPM, "ppm", health, idle)


def _per_s(counter: str, *more: str, health: bool = False) -> Feature:
    return Feature(counter, (counter, *more), "second", 1.0, "/s", health)


_PORT_FEATURES = (
    _ppm("rx_errors", "rx_packets", health=True),
    _ppm("tx_errors", "tx_packets", health=True),
    _per_s("symbol_errors", health=True),
    _per_s("link_error_recovery", "link_downed", health=True),
    Feature("paused_by_peer", ("rx_pfc_duration_us",), "second", _PAUSED_PCT, "%"),
    Feature("pausing_peer", ("tx_pfc_duration_us", "tx_pause_duration_us"), "second", _PAUSED_PCT, "%"),
    _per_s("rx_pfc_frames", "rx_pause_frames"),
    _per_s("tx_pfc_frames", "tx_pause_frames"),
)
FEATURES: dict[str, tuple[Feature, ...]] = {
    "nic": (
        *_PORT_FEATURES,
        _ppm("rx_discards", "rx_packets", health=True),  # a lossless NIC that drops cannot keep up
        _ppm("out_of_buffer", "rx_packets", health=True),
        _ppm("out_of_sequence", "rx_packets", health=True),
        _ppm("packet_seq_err", "tx_packets", health=True),
        _ppm("implied_nak_seq_err", "tx_packets", health=True),
        _ppm("local_ack_timeout_err", "tx_packets", health=True),
        _per_s("rnr_nak_retry_err", health=True),
        _ppm("rx_ecn_marked_packets", "rx_packets"),
        _ppm("rx_ecn_marked_packets", "rx_packets", idle="rx"),
        _ppm("cnp_sent", "rx_packets"),
        _ppm("cnp_received", "tx_packets"),
        _ppm("cnp_received", "tx_packets", idle="tx"),
        _per_s("tx_wait"),
        _per_s("rx_buffer_passed_thres"),
    ),
    "switch": (
        *_PORT_FEATURES,
        _ppm("rx_discards", "rx_packets"),
        _ppm("tx_discards", "tx_packets"),
        _ppm("queue_drops", "tx_packets"),
        _ppm("queue_ecn_marked_packets", "tx_packets"),
        Feature("queue_delay", ("queue_occupancy_bytes",), "line", _US_OF_LINE, "us"),
        Feature("queue_delay*idle_tx", ("queue_occupancy_bytes",), "line", _US_OF_LINE, "us", True, "tx"),
    ),
}
"""Per device kind. At a NIC, ECN while the line is idle is load-shaped, not health: a NIC behind a
congested fabric link receives marks at any rate. A counter a device does not report makes its
feature unknown (imputed with the baseline median); a feature unknown throughout the baseline is
left out of that class's model."""


@dataclass(frozen=True)
class _Plan:
    """A counter table's features as column gathers and sums, with no BLAS call: a matrix product
    would be shorter, but BLAS threads spinning after each call steal the core from stage 1.

    feature = log1p(floor(ratio * (1 - busy share of its direction))), where
    ratio = sum(numerator columns) * unit / (packet column + 1, or line rate, or 1 per second)."""

    num_cols: np.ndarray  # numerator columns of every feature, concatenated
    num_starts: np.ndarray  # where each feature's columns start in num_cols
    unit: np.ndarray
    per_line: np.ndarray  # 1 where divided by line rate
    floor: np.ndarray  # 1 elsewhere: one packet (or one second) keeps a ratio finite on an idle port
    packet_features: np.ndarray  # features divided by a packet count ...
    packet_cols: np.ndarray  # ... and that count's column
    carried_cols: np.ndarray  # tx_bytes, rx_bytes
    paused_cols: tuple[np.ndarray, np.ndarray]  # what stops tx, rx (microseconds per second)
    idle: np.ndarray  # per feature: 0, or 1 (tx) / 2 (rx) whose busy share weighs it
    absent: np.ndarray  # features this counter table cannot give


def _plan(layout: Layout, features: tuple[Feature, ...]) -> _Plan:
    columns: dict[str, list[int]] = {}
    for i, c in enumerate(layout.counters):
        columns.setdefault(c.name, []).append(i)
    num = [[i for name in f.counters for i in columns.get(name, ())] for f in features]
    packets = [j for j, f in enumerate(features) if f.per in columns]
    directions = list(_DIRECTION)
    absent = [
        not cols
        or (f.per.endswith("_packets") and f.per not in columns)
        or (f.idle != "" and _DIRECTION[f.idle][0] not in columns)
        for f, cols in zip(features, num, strict=True)
    ]
    return _Plan(
        num_cols=np.array([i for cols in num for i in cols or [0]], dtype=np.intp),
        num_starts=np.cumsum([0] + [len(cols) or 1 for cols in num[:-1]]).astype(np.intp),
        unit=np.array([f.unit for f in features]),
        per_line=np.array([f.per == "line" for f in features], dtype=np.float64),
        floor=np.array([f.per != "line" for f in features], dtype=np.float64),
        packet_features=np.array(packets, dtype=np.intp),
        packet_cols=np.array([columns[features[j].per][0] for j in packets], dtype=np.intp),
        carried_cols=np.array([columns.get(sent, [0])[0] for sent, _ in _DIRECTION.values()], dtype=np.intp),
        paused_cols=tuple(np.array(columns.get(stop, []), dtype=np.intp) for _, stop in _DIRECTION.values()),
        idle=np.array([directions.index(f.idle) + 1 if f.idle else 0 for f in features], dtype=np.intp),
        absent=np.array(absent, dtype=bool),
    )


class FeatureExtractor:
    """Features of many ports in a few array operations (no loop over counters or ports). An
    unknown rate (NaN) makes every feature that uses it unknown, by plain NaN arithmetic."""

    def __init__(self) -> None:
        self._plans: dict[int, tuple[Layout, _Plan]] = {}

    def __call__(self, layout: Layout, kind: str, values: np.ndarray, line_Bps: np.ndarray) -> np.ndarray:
        """``values``: rates of ports (rows) in ``layout``'s columns; ``line_Bps``: each row's line rate."""
        plan = self._plan_for(layout, kind)
        line = line_Bps[:, None]
        num = np.add.reduceat(values[:, plan.num_cols], plan.num_starts, axis=1)
        num *= plan.unit
        den = line * plan.per_line
        den += plan.floor
        den[:, plan.packet_features] += values[:, plan.packet_cols]
        busy = np.zeros((len(values), 3))
        busy[:, 1:] = values[:, plan.carried_cols] / line
        for k, cols in enumerate(plan.paused_cols):
            if cols.size:
                busy[:, k + 1] += values[:, cols].sum(axis=1) * _US
        np.clip(busy, 0.0, 1.0, out=busy)
        num /= den
        num *= 1.0 - busy[:, plan.idle]
        out = np.log1p(np.floor(num))
        out[:, plan.absent] = np.nan
        return out

    def _plan_for(self, layout: Layout, kind: str) -> _Plan:
        found = self._plans.get(id(layout))
        if found is None or found[0] is not layout:
            found = self._plans[id(layout)] = (layout, _plan(layout, FEATURES[kind]))
        return found[1]


def _kind(frame: RateFrame) -> str:
    return "nic" if frame.device_kind == "nic" else "switch"


def port_classes(frame: RateFrame, host_facing: np.ndarray | None) -> np.ndarray:
    """Index into CLASSES of every port of the frame; a switch port is host-facing unless the
    topology says otherwise (FabricMap.host_facing's convention)."""
    if frame.device_kind == "nic":
        return np.zeros(len(frame.ports), dtype=np.int8)
    if host_facing is None:
        return np.ones(len(frame.ports), dtype=np.int8)
    return np.where(host_facing, 1, 2).astype(np.int8)


# --- model --------------------------------------------------------------------------------------


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
    score_quantiles: np.ndarray  # forest scores on the baseline at _QUANTILE_LEVELS
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
        return float(np.interp(quantile, _QUANTILE_LEVELS, self.score_quantiles))

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
    model.score_quantiles = np.quantile(model.score(X)[0], _QUANTILE_LEVELS)
    return model


@dataclass
class OutlierModel:
    """Models per port class plus what they were trained on; saved and loaded as one file."""

    classes: dict[str, ClassModel]
    meta: dict

    @classmethod
    def fit(
        cls, batches: dict[str, np.ndarray], config: OutlierConfig, time_range: tuple[int, int] = (0, 0)
    ) -> OutlierModel:
        """One model per class with enough rows to estimate its threshold quantile: a class needs
        at least 1 / (1 - quantile) baseline rows for that quantile to exist; others are skipped."""
        import sklearn

        need = math.ceil(1.0 / (1.0 - config.threshold_quantile))
        fitted, skipped = {}, {}
        for name in CLASSES:
            rows = len(batches[name]) if name in batches else 0
            if rows >= need:
                fitted[name] = fit_class(batches[name], _KIND_OF_CLASS[name], config)
            else:
                skipped[name] = f"{rows} rows, {need} needed for quantile {config.threshold_quantile}"
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "fabricwatch_version": _installed_version(),
            "sklearn_version": sklearn.__version__,
            "trained_quantile": config.threshold_quantile,
            "n_estimators": config.n_estimators,
            "max_samples": config.max_samples,
            "first_ns": int(time_range[0]),
            "last_ns": int(time_range[1]),
            "skipped_classes": skipped,
        }
        return cls(fitted, meta)

    def thresholds(self, quantile: float) -> dict[str, float]:
        return {name: m.threshold(quantile) for name, m in self.classes.items()}

    def save(self, path: str | Path) -> None:
        """A zip of ``meta.json`` (everything but the trees, readable without unpickling) and
        ``forests.pkl``. JSON floats round-trip exactly, so a loaded model scores like the saved one."""
        import pickle

        meta = dict(self.meta)
        meta["thresholds"] = self.thresholds(meta["trained_quantile"])
        meta["quantile_levels"] = _QUANTILE_LEVELS.tolist()
        meta["classes"] = {name: _class_doc(m) for name, m in self.classes.items()}
        forests = pickle.dumps({name: m.forest for name, m in self.classes.items()}, protocol=5)
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("meta.json", json.dumps(meta, indent=1))
            z.writestr("forests.pkl", forests)

    @classmethod
    def load(cls, path: str | Path) -> OutlierModel:
        """Read a saved model, refusing one this code cannot score the way it was trained. The
        trees are unpickled only after the metadata checks pass; as with any pickle, load only
        models you trained."""
        import pickle

        try:
            with zipfile.ZipFile(path) as z:
                meta = json.loads(z.read("meta.json"))
                _check_meta(meta, path)
                docs = {name: _check_class(name, m, path) for name, m in meta.pop("classes").items()}
                forests = pickle.load(io.BytesIO(z.read("forests.pkl")))
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
            raise ModelError(f"{path}: not a fabricwatch outlier model ({exc})") from None
        classes = {name: _class_from_doc(name, m, forests[name]) for name, m in docs.items()}
        for derived in ("thresholds", "quantile_levels"):
            meta.pop(derived)
        return cls(classes, meta)


def _installed_version() -> str:
    """The installed fabricwatch's version, read from its package metadata (the core does not
    import the app for it)."""
    from importlib import metadata

    try:
        return metadata.version("fabricwatch")
    except metadata.PackageNotFoundError:
        return "unknown"


_ARRAYS = ("median", "spread", "ceiling", "score_quantiles")


def _class_doc(m: ClassModel) -> dict:
    return {"features": m.features, "units": m.units, "rows": m.rows} | {
        k: getattr(m, k).tolist() for k in _ARRAYS
    }


def _check_meta(meta: dict, path: str | Path) -> None:
    import sklearn

    found = (meta.get("format"), meta.get("format_version"))
    if found != (FORMAT, FORMAT_VERSION):
        raise ModelError(
            f"{path}: model format {found[0]} v{found[1]}, this fabricwatch reads {FORMAT} "
            f"v{FORMAT_VERSION}: retrain it with `fabricwatch train`"
        )
    saved, here = str(meta.get("sklearn_version")), sklearn.__version__
    if saved.split(".")[:2] != here.split(".")[:2]:
        raise ModelError(
            f"{path}: trained with scikit-learn {saved}, this is {here}: its trees may not load or "
            "score the same; retrain it with `fabricwatch train`"
        )
    if meta.get("quantile_levels") != _QUANTILE_LEVELS.tolist():
        raise ModelError(f"{path}: score quantiles at other levels than this fabricwatch's; retrain it")


def _check_class(name: str, m: dict, path: str | Path) -> dict:
    """The class's feature list must be features this code computes, in the same units."""
    if name not in CLASSES:
        raise ModelError(f"{path}: unknown port class {name!r} (known: {', '.join(CLASSES)})")
    defs = {f.name: f for f in FEATURES[_KIND_OF_CLASS[name]]}
    unknown = [f for f in m["features"] if f not in defs]
    changed = [
        f for f, u in zip(m["features"], m["units"], strict=True) if f in defs and defs[f].unit_name != u
    ]
    problems = [f"features this fabricwatch does not compute: {', '.join(unknown)}"] if unknown else []
    problems += [f"features whose unit changed: {', '.join(changed)}"] if changed else []
    if problems:
        raise ModelError(f"{path}: class {name}: {'; '.join(problems)}; retrain it with `fabricwatch train`")
    return m


def _class_from_doc(name: str, m: dict, forest: object) -> ClassModel:
    defs = FEATURES[_KIND_OF_CLASS[name]]
    index = {f.name: j for j, f in enumerate(defs)}
    columns = np.array([index[f] for f in m["features"]], dtype=np.intp)
    return ClassModel(
        features=list(m["features"]),
        units=list(m["units"]),
        columns=columns,
        health=np.array([defs[j].health for j in columns], dtype=bool),
        rows=int(m["rows"]),
        forest=forest,
        **{k: np.array(m[k], dtype=np.float64) for k in _ARRAYS},
    )


# --- stage-1 components -------------------------------------------------------------------------


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
        if self.minutes is not None and frame.ts_ns - self.first_ns > self.minutes * 60 * _NS:
            return []
        self.last_ns = max(self.last_ns, frame.ts_ns)
        X = self._extract(frame.layout, _kind(frame), frame.values, line_Bps)
        classes = port_classes(frame, host_facing)
        begin = np.full(len(X), frame.ts_ns - int(frame.dt_s * _NS))
        end = np.full(len(X), frame.ts_ns)
        for c in np.unique(classes):
            rows = classes == c
            self._blocks[CLASSES[c]].append((X[rows], begin[rows], end[rows]))
        return []

    def flush(self) -> list[Symptom]:
        return []

    def batches(self, labels: list[Label]) -> dict[str, np.ndarray]:
        """Feature rows per class, without any interval that overlaps a fault label: a baseline
        trace may hold faults, and only benign look-alikes may be learned as normal."""
        faults = [(lb.start_ns, lb.end_ns) for lb in labels if lb.kind != "benign"]
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


class _Persistence:
    """Per-port history of the last ``window`` polls as a bit mask (newest in bit 0), by slot."""

    def __init__(self, persist: int, window: int) -> None:
        self.persist, self.mask = persist, (1 << window) - 1
        codes = range(1 << window)
        self._count = np.array([bin(c).count("1") for c in codes], dtype=np.int64)
        self._age = np.array([c.bit_length() for c in codes], dtype=np.int64)
        self.history = np.zeros(0, dtype=np.int64)
        self.active = np.zeros(0, dtype=bool)
        self.since_ns = np.zeros(0, dtype=np.int64)

    def grow(self, n: int) -> None:
        extra = n - len(self.history)
        if extra > 0:
            self.history = np.r_[self.history, np.zeros(extra, dtype=np.int64)]
            self.active = np.r_[self.active, np.zeros(extra, dtype=bool)]
            self.since_ns = np.r_[self.since_ns, np.zeros(extra, dtype=np.int64)]

    def step(
        self, slots: np.ndarray, anomalous: np.ndarray, ts_ns: np.ndarray, dt_ns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One poll of distinct slots; returns (active now, cleared now) for those rows. An outlier
        starts at the beginning of the oldest anomalous poll still in the window."""
        h = ((self.history[slots] << 1) | anomalous) & self.mask
        self.history[slots] = h
        was = self.active[slots]
        start = (self._count[h] >= self.persist) & ~was
        cleared = was & (h == 0)
        self.since_ns[slots[start]] = ts_ns[start] - self._age[h[start]] * dt_ns[start]
        now = (was | start) & ~cleared
        self.active[slots] = now
        return now, cleared


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
        self._state = _Persistence(self.config.persist_polls, self.config.window_polls)

    def update(self, frame: RateFrame, line_Bps: np.ndarray, host_facing: np.ndarray | None) -> list[Symptom]:
        self._pending[_kind(frame)].append(
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
            dt=np.array([int(f.dt_s * _NS) for f in frames])[frame_of],
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
