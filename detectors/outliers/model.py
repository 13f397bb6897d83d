"""The fitted model of every port class and its file format."""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fabricwatch.detectors.outliers.config import OutlierConfig
from fabricwatch.detectors.outliers.features import CLASSES, FEATURES
from fabricwatch.detectors.outliers.forest import (
    KIND_OF_CLASS,
    QUANTILE_LEVELS,
    ClassModel,
    Forest,
    fit_class,
)

FORMAT = "fabricwatch-outliers"
FORMAT_VERSION = 2
"""v1 stored the trees as a pickle; v2 stores them as arrays."""


class ModelError(ValueError):
    """A model file that cannot be used here; the message names the problem and what to do."""


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
                fitted[name] = fit_class(batches[name], KIND_OF_CLASS[name], config)
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
        """A zip of ``meta.json`` (everything but the trees) and ``forests.npz`` (the trees as
        plain arrays, read back with ``allow_pickle=False``). JSON floats round-trip exactly, so a
        loaded model scores like the saved one."""
        meta = dict(self.meta)
        meta["thresholds"] = self.thresholds(meta["trained_quantile"])
        meta["quantile_levels"] = QUANTILE_LEVELS.tolist()
        meta["classes"] = {name: _class_doc(m) for name, m in self.classes.items()}
        arrays: dict[str, np.ndarray] = {}
        for name, m in self.classes.items():
            arrays |= m.forest.arrays(name)
        forests = io.BytesIO()
        np.savez(forests, allow_pickle=False, **arrays)
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("meta.json", json.dumps(meta, indent=1))
            z.writestr("forests.npz", forests.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> OutlierModel:
        """Read a saved model, refusing one this code cannot score the way it was trained. Nothing
        in the file is code: the trees are arrays, loaded without pickle and checked before use."""
        try:
            with zipfile.ZipFile(path) as z:
                meta = json.loads(z.read("meta.json"))
                _check_meta(meta, path)
                docs = {name: _check_class(name, m, path) for name, m in meta.pop("classes").items()}
                with np.load(io.BytesIO(z.read("forests.npz")), allow_pickle=False) as arrays:
                    forests = {name: Forest.from_arrays(arrays, name) for name in docs}
        except RecursionError:  # a meta.json nested too deep to be ours: refused, with the reason
            why = "meta.json nested too deeply"
            raise ModelError(f"{path}: not a fabricwatch outlier model ({why})") from None
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, ValueError, OSError) as exc:
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
    if found == (FORMAT, 1):
        raise ModelError(
            f"{path}: a model file of an earlier fabricwatch (format v1), whose trees are a pickle, "
            "which could run code when loaded: it is not loaded; retrain it with `fabricwatch train`"
        )
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
    if meta.get("quantile_levels") != QUANTILE_LEVELS.tolist():
        raise ModelError(f"{path}: score quantiles at other levels than this fabricwatch's; retrain it")


def _check_class(name: str, m: dict, path: str | Path) -> dict:
    """The class's feature list must be features this code computes, in the same units."""
    if name not in CLASSES:
        raise ModelError(f"{path}: unknown port class {name!r} (known: {', '.join(CLASSES)})")
    defs = {f.name: f for f in FEATURES[KIND_OF_CLASS[name]]}
    unknown = [f for f in m["features"] if f not in defs]
    changed = [
        f for f, u in zip(m["features"], m["units"], strict=True) if f in defs and defs[f].unit_name != u
    ]
    problems = [f"features this fabricwatch does not compute: {', '.join(unknown)}"] if unknown else []
    problems += [f"features whose unit changed: {', '.join(changed)}"] if changed else []
    if problems:
        raise ModelError(f"{path}: class {name}: {'; '.join(problems)}; retrain it with `fabricwatch train`")
    return m


def _class_from_doc(name: str, m: dict, forest: Forest) -> ClassModel:
    defs = FEATURES[KIND_OF_CLASS[name]]
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
