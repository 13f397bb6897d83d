"""``fabricwatch phases collect|import``: collective phases from real training jobs' NCCL/RCCL
logs, followed live on a node or read from finished logs, to ``fabric.phases`` or a trace."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from fabricwatch.cli import options
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CommGraph, Phase, PhaseMessage, encode, phase_time

if TYPE_CHECKING:
    from fabricwatch.ingest.phases.nccl_phases import JobReaders
    from fabricwatch.streams.kafka_io import Publisher

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
    from fabricwatch.ingest.phases.nccl_phases import JobReaders

    if not 0 < args.gap <= 60:
        raise ValueError("--gap must be between 0 and 60 seconds")
    source = "nccl-log" if args.mode == "import" else f"nccl-log:{_hostname()}"
    readers = JobReaders(args.job, args.gap, source, _warn, args.mode == "collect")
    if args.mode == "import":
        return _import(args, readers)
    return _collect(args, readers)


def _import(args: argparse.Namespace, readers: JobReaders) -> int:
    from fabricwatch.ingest.phases.formats import FormatError, detect, records
    from fabricwatch.schemas.trace import TraceWriter

    phases: list[PhaseMessage] = []
    failed = 0
    for path in args.files:
        reader = readers.reader(str(path))
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            kind = detect(text)
            if kind == "nccl-log":
                phases += [ph for line in text.splitlines() for ph in reader.line(line)]
                continue
            skipped: list[str] = []
            for rec in records(kind, text, args.host, skipped):
                phases += reader.record(rec)
            for problem in skipped:
                reader.problem(problem, f"{path}: {problem}")
        except FormatError as exc:
            failed += 1
            _warn(f"{path}: {exc}; skipped")
    phases += readers.close_all()
    _graphs_before_their_phases(phases)
    phases.sort(key=phase_time)
    with TraceWriter(
        args.out, "phases import", time.time_ns(), {"jobs": sorted({p.job for p in phases})}
    ) as w:
        for ph in phases:
            w.write_message(topics.PHASES, ph.job, phase_time(ph), ph)
    _summary(readers, args.out)
    return 0 if phases and not failed else 1


def _collect(args: argparse.Namespace, readers: JobReaders) -> int:
    from fabricwatch.cli.collect_outputs import outcomes, publishing, serve_metrics
    from fabricwatch.ingest.phases.log_tail import LogTail
    from fabricwatch.phase_metrics import PhaseMetrics
    from fabricwatch.schemas.trace import TraceWriter
    from fabricwatch.streams.kafka_io import Publisher, ensure_topics

    if not 0.01 <= args.interval <= 10:
        raise ValueError("--interval must be between 0.01 and 10 seconds")
    stopping = options.Stopping()
    with ExitStack() as stack:
        outputs = []
        publisher = None
        if args.out is not None:
            writer = stack.enter_context(TraceWriter(args.out, "phases collect", time.time_ns(), {}))
            outputs.append(lambda ph: writer.write_message(topics.PHASES, ph.job, phase_time(ph), ph))
        if publishing(args):
            settings = options.broker_settings(args)
            ensure_topics(settings, [topics.PHASES])
            publisher = Publisher(settings)
            stack.callback(_close_publisher, publisher)
            outputs.append(lambda ph: publisher.send(topics.PHASES, ph.job, encode(ph), phase_time(ph)))
        if not outputs:
            raise ValueError("nowhere to put the phases: give --broker HOST:PORT, --out TRACE, or both")
        tail = stack.enter_context(LogTail(args.log, args.from_start))
        published = outcomes(publisher) if publisher else None
        metrics = PhaseMetrics(tail.stats, readers.stats, lambda: readers.phases, args.interval, published)
        serve_metrics(
            stack,
            metrics,
            args.web_bind,
            args.web_port,
            "phases collect",
            publisher,
            _warn,
        )
        reads = 0
        while not stopping.event.is_set() and (args.count is None or reads < args.count):
            began = time.monotonic()
            now = time.time_ns()
            closed = [ph for path, text in tail.read_chunks() for ph in readers.reader(path).chunk(text, now)]
            closed += readers.due(time.time_ns())
            for ph in closed:
                for put in outputs:
                    put(ph)
            reads += 1
            idle = metrics.observe_read(time.monotonic() - began)
            if idle:
                _warn(f"{idle} ({', '.join(args.log)}; NCCL_DEBUG_FILE must write there)")
            stopping.event.wait(args.interval)
        for ph in readers.close_all():
            for put in outputs:
                put(ph)
        t = tail.stats
        print(
            f"followed {t.files} files: {t.lines} lines ({t.rotations} rotations, {t.truncations} "
            f"truncations, {t.vanished} removed, {t.not_utf8} not UTF-8)",
            file=sys.stderr,
        )
    _summary(readers, args.out)
    return stopping.exit_code


def _close_publisher(publisher: Publisher) -> None:
    publisher.close()
    s = publisher.stats
    print(f"published {s.acked} of {s.sent} phases ({s.failed} failed, {s.dropped} dropped)", file=sys.stderr)


def _graphs_before_their_phases(messages: list[PhaseMessage]) -> None:
    """A graph whose init line had no time of its own was stamped when it was read: in a finished
    log that is long after its phases, so it is placed at its communicator's first phase instead
    (replay gives stage 2 the graph before the collectives it explains)."""
    first: dict[tuple[str, str], int] = {}
    for m in messages:
        if isinstance(m, Phase):
            key = (m.job, m.comm)
            first[key] = min(first.get(key, m.begin_ns), m.begin_ns)
    for m in messages:
        if isinstance(m, CommGraph) and (m.job, m.comm) in first:
            m.ts_ns = min(m.ts_ns, first[(m.job, m.comm)])


def _summary(readers: JobReaders, out: Path | None) -> None:
    s, g = readers.stats, readers.graph_stats
    where = f" to {out}" if out is not None else ""
    print(
        f"{s.calls} collective calls and {s.inits} communicator inits in {s.lines} lines made "
        f"{readers.phases} phases and {g.graphs} graphs of {g.connections} connections{where}; "
        f"{sum(s.problems.values())} lines skipped, {s.untimed} calls without a time, "
        f"{g.unbound} connections of no known communicator"
    )


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _warn(text: str) -> None:
    print(f"fabricwatch phases: {text}", file=sys.stderr, flush=True)
