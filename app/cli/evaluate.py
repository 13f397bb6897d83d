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
    seeds = p.add_mutually_exclusive_group()
    options.add_seed(seeds, "each scenario's own")
    seeds.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        metavar="RANGE",
        help="run the suite under each of these seeds (1-5, 1,3,7) and pass only if every seed passes; "
        "prints each kind's mean and worst seed",
    )
    options.add_json(p, "the report, one document,")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes (default: the number of CPUs)",
    )


def _seeds(text: str) -> list[int]:
    from fabricwatch.evaluate import parse_seeds

    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from fabricwatch.detectors.pipeline import Pipeline
    from fabricwatch.detectors.registry import REGISTRY
    from fabricwatch.evaluate import (
        ScenarioResult,
        pipeline_with_model,
        rule_kinds,
        run_seeds,
        scenario_paths,
    )

    paths = scenario_paths(args.scenarios)
    config = options.detector_config(args)
    seeds = args.seeds or [args.seed]
    done = 0

    def progress(r: ScenarioResult) -> None:
        nonlocal done
        done += 1
        found = sum(lb.detected for lb in r.labels)
        seed = f" seed {r.seed}" if args.seeds else ""
        print(
            f"[{done}/{len(paths) * len(seeds)}] {r.name}{seed}: {found}/{len(r.labels)} faults found, "
            f"{len(r.false_alerts)} false alerts ({r.wall_s:.1f} s replay)",
            file=sys.stderr,
        )

    factory, kinds = Pipeline, rule_kinds()
    if args.model is not None:
        factory, kinds = functools.partial(pipeline_with_model, args.model), REGISTRY.kinds()
    report = run_seeds(paths, seeds, config, factory, kinds, workers=args.jobs, on_result=progress)
    suite = report.by_seed[seeds[0]] if args.seeds is None else report
    if args.json:
        json.dump(suite.to_json(), sys.stdout, indent=2)
        print()
    elif args.seeds is None:
        console.print_suite(suite, sys.stdout)
    else:
        console.print_seeds(report, sys.stdout)
    return 0 if report.passed else 1
