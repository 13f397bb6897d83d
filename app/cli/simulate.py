"""``fabricwatch simulate``: a scenario into a trace file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from fabricwatch.cli import options

HELP = "simulate a fabric scenario into a trace file"
DESCRIPTION = """Simulate a leaf-spine fabric running training jobs, with the scenario's injected faults
and their ground-truth labels, into a trace file. Deterministic for a seed."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help=HELP, description=DESCRIPTION)
    options.add_scenario(p)
    options.add_out(p, required=True)


def run(args: argparse.Namespace) -> int:
    simulate_to(args.scenario, args.out, args.seed, sys.stdout)
    return 0


def simulate_to(scenario: Path | None, out_path: Path, seed: int | None, out: TextIO) -> None:
    from fabricwatch.ingest.simulator import load_scenario, simulate

    stats = simulate(load_scenario(scenario or options.default_scenario()), out_path, seed=seed)
    print(
        f"wrote {out_path}: {stats.records} records, {stats.snapshots} snapshots, {stats.values} counter "
        f"values, {stats.simulated_seconds:.0f} simulated s in {stats.wall_seconds:.1f} s",
        file=out,
    )
