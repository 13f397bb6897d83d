"""NCCL/RCCL log lines into phases and communication graphs: each line parsed (``nccl_log``), calls
coalesced (``phase_coalescer``), connections gathered per communicator (``comm_graph``), and every
line that cannot be read counted and said once per kind.

One bad line costs only itself: a COLL line cut short, one of a layout this build does not know, a
datatype past NCCL's, bytes that are not UTF-8. Untimed lines are stamped with the time they were
read when reading live; when importing a finished log, that time means nothing, so untimed calls
are counted and left out (``stamp_untimed=False``) and the user is told how to log the time.

A finished job's records come a file per rank (or per process), each spanning the whole run: read
one after another, the second file's first calls would join the first file's last phase and
stretch it over the run. So an import defers its calls (``defer=True``) and coalesces them in time
order when it closes, and keeps each timed call (``timings``) for the job's metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabricwatch.ingest.phases.coalescer import PhaseCoalescer
from fabricwatch.ingest.phases.comm_graph import GraphBuilder, GraphStats
from fabricwatch.ingest.phases.nccl_log import (
    COLL_HINT,
    CONNECTION_HINTS,
    CollCall,
    CommInit,
    Connection,
    LineError,
    NetDevices,
    parse_line,
    scan,
)
from fabricwatch.ingest.phases.steps import StepMark, step_messages
from fabricwatch.ingest.phases.timings import timed_messages
from fabricwatch.schemas.messages import PhaseMessage

UNTIMED = (
    "COLL lines without a time cannot be placed when importing a finished log; log with "
    "NCCL_DEBUG_TIMESTAMP_LEVELS=INFO (NCCL 2.26 or later), or follow the log live with "
    "`fabricwatch phases collect`, which stamps each line as it is written"
)


@dataclass
class ReadStats:
    lines: int = 0
    records: int = 0
    """Records of the formats other than NCCL's log (``formats``), each a call."""
    calls: int = 0
    inits: int = 0
    untimed: int = 0
    timed: int = 0
    """Calls kept with their own duration (``Collectives``)."""
    entered: int = 0
    """Of the timed calls, those a rank entered and had not completed when its record was written."""
    steps: int = 0
    """Training steps of a rank, as its profiler marked them (``Steps``)."""
    unbound: int = 0
    """Timed calls of a process that never said which communicator and rank it is."""
    problems: dict[str, int] = field(default_factory=dict)


class NcclPhaseReader:
    """Feed lines with ``line``; it returns the phases that closed. ``due`` and ``close_all``
    close idle and remaining phases, and give the communication graphs that gained edges."""

    def __init__(
        self,
        coalescer: PhaseCoalescer,
        warn: Callable[[str], None] = print,
        stamp_untimed: bool = True,
        stats: ReadStats | None = None,
        said: set[str] | None = None,
        defer: bool = False,
        upper_bound: bool = False,
    ) -> None:
        self.coalescer = coalescer
        self.upper_bound = upper_bound
        """Its records' durations include the wait to start (``Collectives.upper_bound``)."""
        self._deferred: list[CollCall] | None = [] if defer else None
        self._steps: list[StepMark] = []
        self.graph = GraphBuilder(coalescer.job, coalescer.source)
        self.stats = stats if stats is not None else ReadStats()
        self._warn = warn
        self._stamp_untimed = stamp_untimed
        self._said = said if said is not None else set()

    def line(self, text: str, read_ns: int | None = None) -> Sequence[PhaseMessage]:
        self.stats.lines += 1
        if "\ufffd" in text:
            self._problem("not UTF-8", f"a line with bytes that are not UTF-8: {text.strip()[:100]!r}")
        try:
            parsed = parse_line(text)
        except LineError as exc:
            self._problem(str(exc).split(":")[0], str(exc))
            return []
        now = read_ns if read_ns is not None else time.time_ns()
        if isinstance(parsed, CommInit):
            self.stats.inits += 1
            self.coalescer.init(parsed)
            self.graph.init(parsed, now)
            return []
        if isinstance(parsed, Connection):
            self.graph.connection(parsed, now)
            return []
        if isinstance(parsed, NetDevices):
            self.graph.devices(parsed, now)
            return []
        if parsed is None:
            return []
        self.stats.calls += 1
        if parsed.ts_ns is None and not self._stamp_untimed:
            self._untimed(1)
            return []
        if self._deferred is not None:
            self._deferred.append(parsed)
            return []
        return self.coalescer.call(parsed, now)

    def chunk(self, text: str, read_ns: int | None = None) -> Sequence[PhaseMessage]:
        """Many lines at once (what one read of a file gave, ending with a newline): the phases
        ``line`` would give for each, from one regex scan of the whole text. Text that holds
        anything the scan does not cover (an INIT or connection line, bytes that are not UTF-8, a
        COLL-like line it cannot read) goes line by line, so every problem is still counted and said.
        A text of COLL lines only, a live collector's usual read, is known as such from two counts,
        without looking for anything else in it."""
        calls, matched, kept = scan(text)
        lines = text.count("\n")
        only_calls = matched == lines and kept == matched
        if "\ufffd" in text or not (only_calls or self._calls_and_others(text, kept)):
            return [ph for line in text.splitlines() for ph in self.line(line, read_ns)]
        self.stats.lines += lines
        self.stats.calls += matched
        if not self._stamp_untimed:
            timed = [c for c in calls if c.ts_ns is not None]
            if len(timed) < len(calls):
                self._untimed(sum(c.n for c in calls if c.ts_ns is None))
            calls = timed
        if self._deferred is not None:
            self._deferred += calls
            return []
        return self.coalescer.calls(calls, read_ns if read_ns is not None else time.time_ns())

    @staticmethod
    def _calls_and_others(text: str, kept: int) -> bool:
        """Whether the scan read every COLL-like line and the rest holds no INIT or connection
        line (other lines are not ours and are skipped either way)."""
        if "Init COMPLETE" in text or any(hint in text for hint in CONNECTION_HINTS):
            return False
        return kept == text.count(COLL_HINT)

    def record(self, rec: CollCall | CommInit | StepMark) -> Sequence[PhaseMessage]:
        """A call, a communicator or a step from another record of the job (``formats``), timed;
        steps are sent when the reader closes."""
        if isinstance(rec, CommInit):
            self.coalescer.init(rec)
            return []
        if isinstance(rec, StepMark):
            self.stats.steps += 1
            self._steps.append(rec)
            return []
        self.stats.records += 1
        self.stats.calls += rec.n
        if self._deferred is not None:
            self._deferred.append(rec)
            return []
        return self.coalescer.call(rec, rec.ts_ns or 0)

    def problem(self, kind: str, text: str) -> None:
        """Something that cost a line or a record: counted, and said once per kind."""
        self._problem(kind, text)

    def due(self, now_ns: int) -> list[PhaseMessage]:
        self.graph.running(self.coalescer.running(), now_ns)
        return [*self.graph.due(now_ns), *self.coalescer.due(now_ns)]

    def close_all(self) -> list[PhaseMessage]:
        """Every graph and phase still open; a deferring reader's phases, made in time order, and
        its timed calls."""
        out: list[PhaseMessage] = [*self.graph.close_all()]
        if self._deferred:
            calls, self._deferred = sorted(self._deferred, key=lambda c: c.ts_ns or 0), []
            out += self.coalescer.calls(calls, 0)
            timed, unbound = timed_messages(
                self.coalescer.job, self.coalescer.source, calls, self.coalescer.comms, self.upper_bound
            )
            self.stats.timed += sum(len(m.calls) for m in timed)
            self.stats.entered += sum(not c.completed for m in timed for c in m.calls)
            self.stats.unbound += unbound
            out += timed
        if self._steps:
            out += step_messages(self.coalescer.job, self.coalescer.source, self._steps)
            self._steps = []
        return [*out, *self.coalescer.close_all()]

    def _untimed(self, n: int) -> None:
        self.stats.untimed += n
        if "untimed" not in self._said:
            self._said.add("untimed")
            self._warn(UNTIMED)

    def _problem(self, kind: str, text: str) -> None:
        self.stats.problems[kind] = self.stats.problems.get(kind, 0) + 1
        if kind not in self._said:
            self._said.add(kind)
            self._warn(f"{text}; skipped (said once per kind, counted)")


class JobReaders:
    """A node's logs of several jobs: a reader per job, the job named by ``--job`` or by the
    directory a log is in (``NCCL_DEBUG_FILE=/var/log/nccl/<job>/%h.%p.log``). Counts and what was
    said are shared, so a problem is said once whichever job's log shows it."""

    def __init__(
        self,
        job: str | None,
        gap_s: float,
        source: str,
        warn: Callable[[str], None],
        stamp_untimed: bool,
        defer: bool = False,
    ) -> None:
        self.stats = ReadStats()
        self._job, self._gap_s, self._source = job, gap_s, source
        self._warn, self._stamp_untimed, self._defer = warn, stamp_untimed, defer
        self._said: set[str] = set()
        self._readers: dict[tuple[str, str], NcclPhaseReader] = {}

    @property
    def phases(self) -> int:
        return sum(r.coalescer.stats.phases for r in self._readers.values())

    @property
    def graph_stats(self) -> GraphStats:
        """The graph builders' counts, summed over jobs."""
        total = GraphStats()
        for r in self._readers.values():
            total.connections += r.graph.stats.connections
            total.unbound += r.graph.stats.unbound
            total.graphs += r.graph.stats.graphs
        return total

    def reader(self, path: str, source: str | None = None, upper_bound: bool = False) -> NcclPhaseReader:
        """The reader of ``path``'s job for records of ``source`` (the format's name; by default
        the NCCL log's): phases say which record they came from."""
        job = self._job or Path(path).parent.name
        key = (job, source or self._source)
        found = self._readers.get(key)
        if found is None:
            coalescer = PhaseCoalescer(job, self._gap_s, key[1])
            found = NcclPhaseReader(
                coalescer, self._warn, self._stamp_untimed, self.stats, self._said, self._defer, upper_bound
            )
            self._readers[key] = found
        return found

    def due(self, now_ns: int) -> list[PhaseMessage]:
        return [ph for r in self._readers.values() for ph in r.due(now_ns)]

    def close_all(self) -> list[PhaseMessage]:
        return [ph for r in self._readers.values() for ph in r.close_all()]
