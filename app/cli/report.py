"""``fabricwatch report``: PNG charts and an HTML index from the store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from fabricwatch.cli import options
from fabricwatch.storage.schema import ROLLUPS
from fabricwatch.storage.store import DEFAULT_DATA_DIR

HELP = "write PNG charts and an HTML index from the ClickHouse store"
DESCRIPTION = """Draw per-port timelines (utilisation, pause time, ECN, queue) with incidents shaded,
ECMP member shares and port heatmaps from the store, and write an index.html, for people without
Grafana."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help=HELP, description=DESCRIPTION)
    options.add_out(p, "directory of the PNGs and index.html", required=True)
    options.add_store(p, DEFAULT_DATA_DIR)
    p.add_argument(
        "--start", default=None, help="ISO 8601 (UTC) or ns since the epoch (default: the first stored)"
    )
    p.add_argument(
        "--end", default=None, help="ISO 8601 (UTC) or ns since the epoch (default: the last stored)"
    )
    p.add_argument("--ports", type=int, default=8, help="how many per-port timelines to draw (default: 8)")
    p.add_argument(
        "--resolution",
        choices=["rates_raw", *ROLLUPS],
        default=None,
        help="table to draw from (default: the finest with rates in the range)",
    )


def run(args: argparse.Namespace) -> int:
    from fabricwatch.dashboards.report import write_report
    from fabricwatch.storage.queries import parse_time
    from fabricwatch.storage.store import Store

    if args.clickhouse is None and not args.data_dir.is_dir():
        raise ValueError(f"--data-dir {args.data_dir}: no store there (replay or demo with a store first)")
    with Store.open(options.store_target(args)) as store:
        paths = write_report(
            store,
            args.out,
            parse_time(args.start),
            parse_time(args.end),
            max_ports=args.ports,
            resolution=args.resolution,
            on_chart=_progress() if sys.stderr.isatty() else None,
        )
    print(f"wrote {len(paths) - 1} charts and {paths[-1]}")
    return 0


def _progress() -> Callable[[Path], None]:
    """A line per chart on a terminal: drawing from a large store takes a while."""
    drawn = [0]

    def show(path: Path) -> None:
        drawn[0] += 1
        print(f"fabricwatch report: chart {drawn[0]}: {path.name}", file=sys.stderr, flush=True)

    return show
