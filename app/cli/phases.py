"""``fabricwatch phases collect|import``: collective phases from real training jobs' NCCL/RCCL
logs, followed live on a node or read from finished logs, to ``fabric.phases`` or a trace."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fabricwatch.cli import options

if TYPE_CHECKING:
    from fabricwatch.ingest.phases.nccl_phases import JobReaders

HELP = "collective phases from NCCL/RCCL logs: follow them on a node, or import finished ones"
DESCRIPTION = """Read the collective calls that NCCL or RCCL log with NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=INIT,COLL (a directory per job, a file per rank:
NCCL_DEBUG_FILE=/var/log/nccl/<job>/%h.%p.log, which the shipped unit and DaemonSet follow) and turn
each run of one collective on one communicator into one phase: job, collective, communicator,
bytes, hosts and ranks, first and last call. `collect` follows the files as they are written
(rotation and truncation included) and publishes to fabric.phases or writes a trace; `import`
reads finished logs into a trace that `replay --with` merges with a counter trace."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("phases", help=HELP, description=DESCRIPTION)
    modes = p.add_subparsers(dest="mode", metavar="MODE", required=True)
    c = modes.add_parser(
        "collect",
        help="follow a node's NCCL/RCCL logs and publish their phases",
        description="Follow the NCCL/RCCL log files matching --log (new rank files included) and "
        "publish each phase to fabric.phases, keyed by job, or write them to --out. A line without "
        "its own time is stamped as it is read. SIGTERM or Ctrl-C sends what is open and stops.",
    )
    options.add_phase_reading(c)
    c.add_argument(
        "--log", action="append", required=True, help="log file or glob pattern, quoted (repeatable)"
    )
    options.add_out(c, also=True)
    options.add_broker(c, "Kafka bootstrap HOST:PORT to publish to")
    options.add_config(c, section="broker")
    options.add_interval(c, "reads of the files", default=0.2, shown="0.2")
    c.add_argument(
        "--from-start",
        action="store_true",
        help="read the files present at start from their beginning (default: from their end)",
    )
    options.add_count(c, "reads")
    options.add_web(c, "phases collect", bind="127.0.0.1")
    options.add_logging(c)
    i = modes.add_parser(
        "import",
        help="read a finished job's NCCL/RCCL logs, Inspector output or PyTorch traces into a trace",
        description="Read a finished job's records of its collectives into a trace of phases: "
        "NCCL/RCCL logs (only lines with their own time can be placed: log with "
        "NCCL_DEBUG_TIMESTAMP_LEVELS=INFO, NCCL 2.26 or later), the NCCL Inspector's JSON output, "
        "PyTorch profiler (Kineto) traces and Flight Recorder dumps in JSON.",
    )
    options.add_phase_reading(i)
    i.add_argument(
        "files",
        nargs="+",
        type=Path,
        help="NCCL/RCCL logs, NCCL Inspector JSON output, Kineto traces or Flight Recorder dumps "
        "(JSON), told apart by content",
    )
    options.add_host(i, "of Kineto traces and Flight Recorder dumps, which do not say")
    options.add_out(i, required=True)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.collectors import nccl_logs
    from fabricwatch.ingest.phases.nccl_phases import JobReaders

    if not 0 < args.gap <= 60:
        raise ValueError("--gap must be between 0 and 60 seconds")
    source = "nccl-log" if args.mode == "import" else f"nccl-log:{socket.gethostname()}"
    warn = _log if args.mode == "collect" else _say
    importing = args.mode == "import"
    readers = JobReaders(args.job, args.gap, source, warn, not importing, defer=importing)
    if args.mode == "import":
        failed = nccl_logs.import_files(args.files, readers, args.out, warn, args.host)
        print(nccl_logs.summary(readers, args.out))
        return 1 if failed else 0
    return _collect(args, readers)


def _collect(args: argparse.Namespace, readers: JobReaders) -> int:
    from fabricwatch.collectors import nccl_logs
    from fabricwatch.collectors.frame import Frame, Web

    cfg = nccl_logs.FollowSettings(args.log, args.interval, args.from_start)
    destination = options.destination(args)
    options.start_logging(args, "phases collect")
    stopping = options.Stopping()
    web = Web(args.web_bind, args.web_port)
    with Frame("phases collect", destination, nccl_logs.TOPICS, stopping.event, web, what="phases") as frame:
        nccl_logs.follow(cfg, readers, frame, args.count)
    print(nccl_logs.summary(readers, args.out))
    return stopping.exit_code


def _log(text: str) -> None:
    """The daemon's warnings go through its logging setup (``--log-format json`` stays whole)."""
    logging.getLogger("fabricwatch.phases").warning("%s", text)


def _say(text: str) -> None:
    """A one-off import says what it skipped on stderr, as the other commands that are not daemons."""
    print(f"fabricwatch phases: {text}", file=sys.stderr, flush=True)
