"""``fabricwatch demo``: simulate the demo scenario and replay it, in one process."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from fabricwatch.cli import options
from fabricwatch.cli.replay import replay
from fabricwatch.cli.simulate import simulate_to
from fabricwatch.storage.store import DEFAULT_DATA_DIR

HELP = "simulate the demo scenario and replay it (no broker, no server)"
DESCRIPTION = """Simulate a scenario (the demo by default) and replay it through the detection
pipeline in one process, storing rates and anomalies in the embedded ClickHouse store."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help=HELP, description=DESCRIPTION)
    options.add_scenario(p)
    options.add_detection(p)
    options.add_store(p, DEFAULT_DATA_DIR, can_skip=True)
    p.set_defaults(alerts=None)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="fabricwatch-demo-") as tmp:
        trace = Path(tmp) / "demo.trace.gz"
        simulate_to(args.scenario, trace, args.seed, sys.stderr if args.json else sys.stdout)
        return replay(trace, args)
