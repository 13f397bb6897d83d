"""The other records of a job's collectives ``phases import`` reads, told apart by content, into
the same calls as NCCL's log lines (``nccl_log.CollCall``), so one coalescer makes phases of them:

* the NCCL Inspector profiler plugin's JSON output (plugins/profiler/inspector, format v4.0): one
  object per line per sampled collective, with its communicator id, rank, host, size and time
  (``event_trace_ts`` in the verbose output, else the dump time less the execution time);
* a PyTorch profiler (Kineto) trace: its NCCL kernels (``ncclKernel_*``/``ncclDevKernel_*``) with
  the ``Collective name``, ``In msg nelems`` and ``dtype`` PyTorch records, the rank from
  ``distributedInfo``, times made wall-clock by ``baseTimeNanoseconds`` (older traces stamp
  epoch microseconds directly), and its steps (``ProfilerStep#N``: ``steps.py``);
* PyTorch's Flight Recorder dump in its JSON form (``entries``: ``profiling_name``,
  ``time_created_ns``, sizes and dtypes). Its pickled form is refused: unpickling runs code.

Kineto traces and Flight Recorder dumps do not name the host: the caller says it (``host``). Nor
do they name the process (a kernel's ``pid`` is its GPU, the same in every rank's trace when each
rank sees one device): a file is one rank's, so its rank stands for the process, and the ranks of a
host imported together stay apart.

Refused by name, each with why: the Inspector's Prometheus output (no time per collective); the NCCL
example profiler plugin's trace (``plugins/profiler/example``: its times count from the plugin's
start in each process, not the wall clock, so nothing in it can be placed beside the fabric's
counters); an nccl-tests run (``nccl_tests``: a benchmark, not a job; what it measured is said);
the Flight Recorder's pickled dump (unpickling runs code); JSON of any other shape (its keys are
named).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from fabricwatch.ingest.phases import nccl_tests
from fabricwatch.ingest.phases.nccl_log import KNOWN_OPS, CollCall, CommInit
from fabricwatch.ingest.phases.steps import StepMark, trace_steps

Record = CollCall | CommInit | StepMark
"""What a job's records give: its calls, the communicators they belong to, its steps."""

_TORCH_OPS = {
    "allreduce": "AllReduce",
    "all_reduce": "AllReduce",
    "allgather": "AllGather",
    "all_gather": "AllGather",
    "_allgather_base": "AllGather",
    "all_gather_into_tensor": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "reducescatter": "ReduceScatter",
    "_reduce_scatter_base": "ReduceScatter",
    "reduce_scatter_tensor": "ReduceScatter",
    "all_to_all": "AllToAll",
    "alltoall": "AllToAll",
    "alltoall_base": "AllToAll",
    "all_to_allv": "AllToAll",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "send": "Send",
    "recv": "Recv",
    "sendrecv": "SendRecv",
}
"""PyTorch's names of a collective (``nccl:all_reduce``, Kineto's ``allreduce``) -> ours."""
_KERNEL = re.compile(r"^ncclDev(?:Kernel)?_|^ncclKernel_")
_KERNEL_OP = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_TORCH_DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "Long": 8,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}
"""Bytes per element of PyTorch's scalar types as its profiler and Flight Recorder name them."""


class FormatError(ValueError):
    """A file that is none of the formats, or one that cannot be placed in time."""


_PROFILER_EVENT = re.compile(
    r'"cat":\s*"(?:GROUP_API|COLL_API|COLL|P2P_API|P2P|KERNEL_LAUNCH|GROUP|PROXY|NET|GPU)",\s*"ph":\s*"[be]"'
)
"""An event of NCCL's example profiler plugin (``print_event.cc``): begin/end pairs of its categories."""
UPPER_BOUND = frozenset({"flight-recorder"})
"""Formats whose durations include the wait before a call started (created to completed)."""


def detect(text: str) -> str:
    """``nccl-log``, ``inspector``, ``kineto``, ``flight-recorder``, ``inspector-prometheus``,
    ``nccl-profiler`` or ``nccl-tests``."""
    head = text.lstrip()
    if _PROFILER_EVENT.search(text[:65536]) and '"traceEvents"' not in text[:65536]:
        return "nccl-profiler"  # as the plugin writes it: a JSON array, not always valid JSON
    if head[:1] != "{" and not re.match(r"\[\s*[{\]]", head):  # a log line may start with "["
        if nccl_tests.looks_like(text):
            return "nccl-tests"
        if re.search(r"^nccl_\w+\{", text, re.MULTILINE):
            return "inspector-prometheus"
        return "nccl-log"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            return _json_lines(text)
        raise FormatError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise FormatError("not valid JSON: nested too deeply") from None
    if isinstance(doc, dict) and "traceEvents" in doc:
        return "kineto"
    if isinstance(doc, dict) and "entries" in doc and "pg_config" in doc:
        return "flight-recorder"
    if isinstance(doc, dict) and "coll_perf" in doc:
        return "inspector"
    raise FormatError(f"{_shape(doc)}: none of NCCL Inspector output, a Kineto trace, a Flight Recorder dump")


def _json_lines(text: str) -> str:
    """One JSON object per line: the Inspector's, if its first object is one."""
    first, _ = json.JSONDecoder().raw_decode(text.lstrip())
    if isinstance(first, dict) and ("coll_perf" in first or "p2p_perf" in first):
        return "inspector"
    raise FormatError(
        f"JSON lines of {_shape(first)}: not the NCCL Inspector's (header, metadata, coll_perf)"
    )


def _shape(doc: object) -> str:
    """What a JSON document that is none of ours holds, to say so."""
    if isinstance(doc, dict):
        keys = sorted(doc)
        return f"a JSON object with keys {', '.join(keys[:8])}{', ...' if len(keys) > 8 else ''}"
    if isinstance(doc, list):
        return f"a JSON array of {len(doc)} items"
    return f"a JSON {type(doc).__name__}"


def records(kind: str, text: str, host: str | None, skipped: list[str]) -> Iterator[Record]:
    """The calls (and the communicators they belong to) of a file of ``kind`` (``detect``). A record
    of a collective fabricwatch has no name for is left out and described in ``skipped``."""
    found = _records(kind, text, host, skipped)
    for rec in found:
        if isinstance(rec, CollCall) and rec.op not in KNOWN_OPS:
            skipped.append(f"collective {rec.op!r} is not one fabricwatch knows")
            continue
        yield rec


def _records(kind: str, text: str, host: str | None, skipped: list[str]) -> Iterator[Record]:
    if kind == "inspector":
        return _inspector(text, skipped)
    if kind == "inspector-prometheus":
        raise FormatError(
            "the NCCL Inspector's Prometheus output has no time per collective; import its JSON output"
        )
    if kind == "nccl-profiler":
        raise FormatError(
            "a trace of NCCL's example profiler plugin: its times count from the plugin's start in "
            "each process, not the wall clock, so its collectives cannot be placed beside the "
            "fabric's counters; import the NCCL Inspector's JSON output (plugins/profiler/inspector), "
            "whose records carry their time"
        )
    if kind == "nccl-tests":
        raise FormatError(
            f"{nccl_tests.parse(text).describe()}: a benchmark's table has no time per row and is "
            "not a job's collectives; nothing imported"
        )
    if host is None:
        raise FormatError(f"a {kind} file does not name its host: give --host")
    doc = json.loads(text)
    return _kineto(doc, host) if kind == "kineto" else _flight_recorder(doc, host)


def _inspector(text: str, skipped: list[str]) -> Iterator[CollCall | CommInit]:
    """The Inspector's records, one JSON object per line (its README pretty-prints them; both
    are read). A record that cannot be read costs only itself, described in ``skipped``; a
    point-to-point one (``p2p_perf``) is not a collective and is left out the same way."""
    decoder = json.JSONDecoder()
    at, end = 0, len(text)
    while True:
        while at < end and text[at].isspace():
            at += 1
        if at >= end:
            return
        try:
            obj, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            skipped.append(f"an Inspector file that stops being JSON at character {at}: {exc.msg}")
            return
        if isinstance(obj, dict) and "p2p_perf" in obj and "coll_perf" not in obj:
            skipped.append("an Inspector p2p_perf record: point-to-point, not a collective")
            continue
        try:
            header, meta, perf = obj["header"], obj["metadata"], obj["coll_perf"]
            host, pid, comm = str(meta["hostname"]), int(meta["pid"]), str(header["id"])
            op = _TORCH_OPS.get(str(perf["coll"]).lower(), str(perf["coll"]))
            exec_ns = _ns(perf["coll_exec_time_us"])
            start_us = (perf.get("event_trace_ts") or {}).get("coll_start_ts")
            begin = _ns(start_us) if start_us is not None else _ns(meta["dump_timestamp_us"]) - exec_ns
            nranks = int(header["n_ranks"])
            init = CommInit(host, pid, comm, int(header["rank"]), nranks, comm)
            size = int(perf["coll_msg_size_bytes"])
            seq = int(perf["coll_sn"]) if "coll_sn" in perf else None
            call = _call(host, pid, comm, op, size, nranks, begin, exec_ns, seq)
        except (KeyError, TypeError, ValueError) as exc:
            skipped.append(f"an Inspector record without a readable {exc}")
            continue
        yield init
        yield call


def _kineto(doc: dict[str, Any], host: str) -> Iterator[Record]:
    info = doc.get("distributedInfo") or {}
    rank = int(info.get("rank", 0))
    nranks = int(info.get("world_size", 1))
    base_ns = doc.get("baseTimeNanoseconds")
    events = [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]
    kernels = [e for e in events if e.get("cat") == "kernel" and _KERNEL.match(str(e.get("name", "")))]
    steps = trace_steps(events, _ns, int(base_ns or 0), _KERNEL.match, rank, host)
    first_ns = _ns(kernels[0]["ts"]) if kernels else steps[0].begin_ns if steps else None
    if base_ns is None and first_ns is not None and first_ns < 1e18:  # before 2001: not epoch time
        raise FormatError(
            "this Kineto trace's times are not wall-clock and it has no baseTimeNanoseconds to make them so"
        )
    for k in kernels:
        args = k.get("args") or {}
        name = str(args.get("Collective name") or _kernel_op(str(k["name"])))
        op = _TORCH_OPS.get(name.lower().replace("nccl:", ""), name)
        comm = f"pg:{args.get('Process Group Name', '0')}"
        group = int(args.get("Group size", nranks))
        size = int(args.get("In msg nelems", 0)) * _TORCH_DTYPE_BYTES.get(str(args.get("dtype")), 0)
        begin = _ns(k["ts"]) + int(base_ns or 0)
        yield CommInit(host, rank, comm, rank, group, comm)
        yield _call(host, rank, comm, op, size, group, begin, _ns(k.get("dur", 0)))
    yield from steps


def _call(
    host: str,
    pid: int,
    comm: str,
    op: str,
    size: int,
    nranks: int,
    begin: int,
    dur: int,
    seq: int | None = None,
) -> CollCall:
    return CollCall(host, pid, comm, op, size, nranks, 0, begin, 1, max(dur, 0), seq)


def _ns(us: Any) -> int:
    """Microseconds as JSON gives them, in ns: exact for integers (epoch microseconds are past
    what a float holds exactly once multiplied), rounded for fractions."""
    if isinstance(us, int) and not isinstance(us, bool):
        return us * 1000
    return round(float(us) * 1000)


def _kernel_op(name: str) -> str:
    m = _KERNEL_OP.match(name)
    return m.group(1) if m else name


def _flight_recorder(doc: dict[str, Any], host: str) -> Iterator[CollCall | CommInit]:
    rank = int(doc.get("rank", 0))
    groups = doc.get("pg_config") or {}
    for entry in doc.get("entries", []):
        name = str(entry.get("profiling_name", "")).removeprefix("nccl:")
        op = _TORCH_OPS.get(name, name)
        pg = entry.get("process_group") or ["0"]
        comm = f"pg:{pg[0]}"
        ranks = (groups.get(str(pg[0])) or {}).get("ranks", "[]")
        nranks = len(json.loads(ranks)) if isinstance(ranks, str) else len(ranks)
        size = sum(
            math.prod(shape) * _TORCH_DTYPE_BYTES.get(dtype, 0)
            for shape, dtype in zip(entry.get("input_sizes", []), entry.get("input_dtypes", []), strict=False)
        )
        begin = int(entry["time_created_ns"])
        end = int(entry.get("time_discovered_completed_ns") or begin)
        seq = None if entry.get("is_p2p") else entry.get("collective_seq_id")
        yield CommInit(host, rank, comm, rank, nranks, comm)
        call = _call(host, rank, comm, op, size, nranks, begin, end - begin, seq)
        yield call._replace(pending=True) if entry.get("state") != "completed" else call
