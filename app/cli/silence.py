"""``fabricwatch silence``: add a silence to a silences file."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = "add a silence (label matchers with an expiry) to a silences file"
DESCRIPTION = """Add a silence to the silences_file of the alerts: section; a running alerter re-reads
the file, so the silence takes effect without a restart. Expired silences are dropped."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("silence", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "matchers", nargs="+", metavar="MATCHER", help='label matchers, e.g. device="leaf-3" kind=~"incast"'
    )
    p.add_argument("--file", type=Path, required=True, help="the silences_file of the alerts: section")
    p.add_argument("--for", dest="duration", default="2h", help="how long, e.g. 30m, 2h (default: 2h)")
    p.add_argument("--comment", default="", help="why (default: none)")
    p.add_argument("--author", default=os.environ.get("USER", ""), help="who (default: $USER)")


def run(args: argparse.Namespace) -> int:
    from fabricwatch.alerts.commands import add_silence

    return add_silence(args.file, args.matchers, args.duration, args.comment, args.author, sys.stdout)
