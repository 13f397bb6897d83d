"""``fabricwatch train``: fit the learned outlier model on healthy traces."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fabricwatch.cli import options

HELP = "fit the learned outlier model on baseline (healthy) traces"
DESCRIPTION = """Fit the learned outlier model (one IsolationForest per port class) on healthy
baseline traces; replay, demo, evaluate and worker take the model file with --model."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help=HELP, description=DESCRIPTION)
    p.add_argument("traces", type=Path, nargs="+", metavar="TRACE", help="baseline trace files")
    options.add_out(p, "model file", required=True)
    p.add_argument(
        "--minutes", type=float, default=None, help="only the first M minutes of each trace (default: all)"
    )
    options.add_config(p)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.train import train_outliers

    config = options.detector_config(args)
    started = time.perf_counter()
    model = train_outliers(args.traces, config, args.minutes)
    if not model.classes:
        raise ValueError(f"no port class had enough baseline rows: {model.meta['skipped_classes']}")
    model.save(args.out)
    thresholds = model.thresholds(config.outliers.threshold_quantile)
    for name, m in model.classes.items():
        print(
            f"{name}: {m.rows} rows, {len(m.features)} features, "
            f"threshold {thresholds[name]:.4f} at quantile {config.outliers.threshold_quantile}"
        )
    for name, why in model.meta["skipped_classes"].items():
        print(f"{name}: not trained ({why})")
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s"
    )
    return 0
