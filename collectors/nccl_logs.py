"""A node's NCCL/RCCL logs followed as they are written, each run of one collective on one
communicator a phase on ``fabric.phases`` (keyed by job); or a finished job's records (logs,
Inspector output, Kineto traces, Flight Recorder dumps) read into a trace of phases
(``ingest/phases/README.md``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.collectors.frame import Frame
from fabricwatch.collectors.phase_metrics import PhaseMetrics
from fabricwatch.ingest.phases.formats import UPPER_BOUND, FormatError, detect, records
from fabricwatch.ingest.phases.log_tail import LogTail
from fabricwatch.ingest.phases.nccl_phases import JobReaders
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CommGraph, Phase, PhaseMessage, phase_time
from fabricwatch.schemas.trace import TraceWriter

TOPICS = (topics.PHASES,)


@dataclass(frozen=True)
class FollowSettings:
    logs: Sequence[str]
    """Log files or glob patterns (new rank files included as they appear)."""
    interval_s: float = 0.2
    from_start: bool = False
    """Read the files present at start from their beginning (default: from their end)."""

    def __post_init__(self) -> None:
        if not 0.01 <= self.interval_s <= 10:
            raise ValueError("--interval must be between 0.01 and 10 seconds")


def follow(cfg: FollowSettings, readers: JobReaders, frame: Frame, count: int | None = None) -> None:
    """Read the files every interval until ``frame.stop`` (or ``count`` reads), each closed phase to
    the frame; what is open at the end is sent."""
    with LogTail(cfg.logs, cfg.from_start) as tail:
        metrics = PhaseMetrics(
            tail.stats, readers.stats, lambda: readers.phases, cfg.interval_s, frame.published
        )
        frame.serve(metrics.registry, metrics.health)
        reads = 0
        while not frame.stop.is_set() and (count is None or reads < count):
            began = time.monotonic()
            now = time.time_ns()
            closed = [ph for path, text in tail.read_chunks() for ph in readers.reader(path).chunk(text, now)]
            _put(frame, closed + readers.due(time.time_ns()))
            reads += 1
            idle = metrics.observe_read(time.monotonic() - began)
            if idle:
                frame.warn(f"{idle} ({', '.join(cfg.logs)}; NCCL_DEBUG_FILE must write there)")
            frame.stop.wait(cfg.interval_s)
        _put(frame, readers.close_all())
        t = tail.stats
        frame.say(
            f"followed {t.files} files: {t.lines} lines ({t.rotations} rotations, {t.truncations} "
            f"truncations, {t.vanished} removed, {t.not_utf8} not UTF-8)"
        )


def import_files(
    files: Sequence[Path],
    readers: JobReaders,
    out: Path,
    warn: Callable[[str], None],
    host: str | None = None,
) -> int:
    """Read finished records into the trace ``out``, each told apart by its content; returns how
    many files could not be read (each said once, the others read)."""
    phases: list[PhaseMessage] = []
    failed = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            kind = detect(text)
            if kind == "nccl-log":
                reader = readers.reader(str(path))
                phases += [ph for line in text.splitlines() for ph in reader.line(line)]
                continue
            reader = readers.reader(str(path), kind, kind in UPPER_BOUND)
            skipped: list[str] = []
            for rec in records(kind, text, host, skipped):
                phases += reader.record(rec)
            for problem in skipped:
                reader.problem(problem, f"{path}: {problem}")
        except FormatError as exc:
            failed += 1
            warn(f"{path}: {exc}; skipped")
    phases += readers.close_all()
    _graphs_before_their_phases(phases)
    phases.sort(key=phase_time)
    with TraceWriter(out, "phases import", time.time_ns(), {"jobs": sorted({p.job for p in phases})}) as w:
        for ph in phases:
            w.write_message(topics.PHASES, ph.job, phase_time(ph), ph)
    if not phases and failed < len(files):
        read = len(files) - failed
        warn(
            f"nothing to import: no collective call with its own time in the {read} file(s) read "
            "(an NCCL log needs NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL and, to be imported, "
            "NCCL_DEBUG_TIMESTAMP_LEVELS=INFO)"
        )
    return failed if phases else max(failed, 1)


def summary(readers: JobReaders, out: Path | None) -> str:
    s, g = readers.stats, readers.graph_stats
    where = f" to {out}" if out is not None else ""
    logs = f"{s.calls - s.records} collective calls and {s.inits} communicator inits in {s.lines} log lines"
    read = ([logs] if s.lines else []) + (
        [f"{s.records} collective calls in profilers' records"] if s.records else []
    )
    return (
        f"{' and '.join(read) or 'nothing'} made {readers.phases} phases, {s.timed} timed calls"
        f"{f' ({s.entered} entered and not completed)' if s.entered else ''}, "
        f"{s.steps} steps and {g.graphs} graphs of {g.connections} connections{where}; "
        f"{sum(s.problems.values())} lines or records skipped, {s.untimed} calls without a time, "
        f"{s.unbound} timed calls and {g.unbound} connections of no known communicator"
    )


def _put(frame: Frame, phases: list[PhaseMessage]) -> None:
    for ph in phases:
        frame.put(topics.PHASES, ph.job, ph, phase_time(ph))


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
