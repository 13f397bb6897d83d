"""A job's training steps from its profiler trace: each step's time and how much of it the rank
spent in collectives, what the job's owners mean by "the network's share of an iteration".

A Kineto trace marks each step with a ``ProfilerStep#N`` annotation: on the GPU's timeline
(``gpu_user_annotation``) where the trace has it, which is where the step's kernels run, else on
the CPU's (``user_annotation``; older traces ``cpu_op``), which leads the GPU's by the launch queue.
Within a step:

* time in collectives: the union of the NCCL kernels' intervals, clipped to the step (kernels on
  several streams overlap; each instant counts once);
* exposed: of that, the time no other kernel ran beside it, so the step waited for the network
  rather than computing under it. Computed as |NCCL or compute| - |compute|, both unions.

A step without kernels in the trace (a CPU-only profile) has its time and nothing else: unknown,
not zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from fabricwatch.schemas.messages import Step, Steps

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_STEP_CATS = ("gpu_user_annotation", "user_annotation", "cpu_op", "Operator")
"""Where a step is marked, the GPU's view first."""
MAX_STEPS = 2000
"""Steps per message: a long run's steps go in several small messages."""


class StepMark(NamedTuple):
    """One step of one rank, as its trace marks it."""

    host: str
    rank: int
    step: int
    begin_ns: int
    dur_ns: int
    coll_ns: int | None
    exposed_ns: int | None


def trace_steps(
    events: Sequence[dict[str, Any]],
    us_to_ns: Callable[[Any], int],
    base_ns: int,
    is_collective: Callable[[str], object],
    rank: int,
    host: str,
) -> list[StepMark]:
    """The steps a trace's ``events`` mark (their ``ts`` and ``dur`` in microseconds, ``ts`` from
    ``base_ns``); ``is_collective`` tells an NCCL kernel by its name."""
    marked = [e for e in events if e.get("ph") == "X" and _STEP.match(str(e.get("name", "")))]
    if not marked:
        return []
    cat = next((c for c in _STEP_CATS if any(e.get("cat") == c for e in marked)), None)
    marked = [e for e in marked if cat is None or e.get("cat") == cat]
    begins, ends = _spans(marked, us_to_ns, base_ns)
    kernels = [e for e in events if e.get("cat") == "kernel" and "ts" in e]
    coll: list[int | None] = [None] * len(marked)
    exposed: list[int | None] = [None] * len(marked)
    if kernels:
        k_begin, k_end = _spans(kernels, us_to_ns, base_ns)
        nccl = np.array([bool(is_collective(str(k.get("name", "")))) for k in kernels])
        in_coll = covered(k_begin[nccl], k_end[nccl], begins, ends)
        hidden = covered(k_begin, k_end, begins, ends) - covered(k_begin[~nccl], k_end[~nccl], begins, ends)
        coll, exposed = in_coll.tolist(), hidden.tolist()
    return [
        StepMark(host, rank, int(_STEP.match(str(e["name"])).group(1)), int(b), int(x - b), c, u)  # type: ignore[union-attr]
        for e, b, x, c, u in zip(marked, begins, ends, coll, exposed, strict=True)
        if x > b
    ]


def covered(begins: np.ndarray, ends: np.ndarray, w_begin: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Per window ``[w_begin, w_end)``, how long any of the intervals ``[begins, ends)`` covers it
    (overlaps counted once): the intervals' union, then its covered length before each edge."""
    if begins.size == 0:
        return np.zeros(w_begin.size, dtype=np.int64)
    order = np.argsort(begins, kind="stable")
    b, e = begins[order], np.maximum.accumulate(ends[order])
    new = np.ones(b.size, dtype=bool)
    new[1:] = b[1:] > e[:-1]
    starts = b[new]
    stops = e[np.r_[np.flatnonzero(new)[1:] - 1, b.size - 1]]
    before = np.concatenate([[0], np.cumsum(stops - starts)])

    def length_before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right")
        last = np.maximum(i - 1, 0)
        partial = np.where(i > 0, np.minimum(t, stops[last]) - starts[last], 0)
        return before[last] * (i > 0) + partial

    return length_before(w_end) - length_before(w_begin)


def step_messages(job: str, source: str, marks: Iterable[StepMark]) -> list[Steps]:
    """The ``Steps`` messages of a job's step marks, in time order, ``MAX_STEPS`` a message."""
    ordered = sorted(marks, key=lambda m: (m.begin_ns, m.rank))
    out = []
    for at in range(0, len(ordered), MAX_STEPS):
        chunk = ordered[at : at + MAX_STEPS]
        out.append(
            Steps(
                job=job,
                ts_ns=chunk[0].begin_ns,
                steps=[Step(m.step, m.rank, m.begin_ns, m.dur_ns, m.coll_ns, m.exposed_ns) for m in chunk],
                rank_hosts=dict(sorted({m.rank: m.host for m in chunk if m.host}.items())),
                source=source,
            )
        )
    return out


def _spans(
    events: Sequence[dict[str, Any]], us_to_ns: Callable[[Any], int], base_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    begins = np.array([us_to_ns(e["ts"]) + base_ns for e in events], dtype=np.int64)
    durs = np.array([max(0, us_to_ns(e.get("dur", 0))) for e in events], dtype=np.int64)
    return begins, begins + durs
