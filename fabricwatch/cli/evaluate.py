"""``fabricwatch evaluate``: score the detectors on labelled scenarios."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

from fabricwatch import console
from fabricwatch.cli import options

HELP = "score the detectors on labelled scenarios"
DESCRIPTION = """Simulate and replay labelled scenarios and score every fault kind: precision,
recall, root-cause localisation, delay, false alerts per benign hour. Exits 1 when a threshold
fails (docs/evaluation.md), so CI can gate on it."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "scenarios", type=Path, nargs="+", metavar="SCENARIO_OR_DIR", help="scenario files, or dirs of *.yaml"
    )
    options.add_config(p)
    options.add_model(p)
    p.add_argument("--seed", type=int, default=None, help="seed of every scenario (default: each one's own)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes (default: the number of CPUs)",
    )


def run(args: argparse.Namespace) -> int:
    from fabricwatch.detectors.pipeline import Pipeline
    from fabricwatch.evaluate import (
        RULE_KINDS,
        ScenarioResult,
        pipeline_with_model,
        run_suite,
        scenario_paths,
    )

    paths = scenario_paths(args.scenarios)
    config = options.detector_config(args)
    done = 0

    def progress(r: ScenarioResult) -> None:
        nonlocal done
        done += 1
        found = sum(lb.detected for lb in r.labels)
        print(
            f"[{done}/{len(paths)}] {r.name}: {found}/{len(r.labels)} faults found, "
            f"{len(r.false_alerts)} false alerts ({r.wall_s:.1f} s replay)",
            file=sys.stderr,
        )

    factory, kinds = Pipeline, RULE_KINDS
    if args.model is not None:
        factory, kinds = functools.partial(pipeline_with_model, args.model), RULE_KINDS | {"outlier"}
    report = run_suite(paths, config, args.seed, factory, kinds, workers=args.jobs, on_result=progress)
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        console.print_suite(report, sys.stdout)
    return 0 if report.passed else 1
