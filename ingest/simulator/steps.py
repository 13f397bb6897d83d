"""A simulated job's training steps, as its profiler would mark them (``Steps``, Kineto's
``ProfilerStep#N``): an activity with ``steps`` is one step per burst, from a burst's start to the
next's, on every rank. A fault that stretches the job's steps (``step_stretch``) moves its bursts
apart, and so its steps' times, before these are made; a job that hangs marks no step while it
hangs. Each step is delivered when it ends, at the next poll, as a job's records would be."""

from __future__ import annotations

from fabricwatch.ingest.simulator.traffic import ActivityRun
from fabricwatch.schemas.messages import Step, Steps

NS = 1_000_000_000
HANG_STEPS = 3.0
"""A gap between two bursts this many periods long is a hang, not a step (``job_stop``)."""


def step_messages(activities: list[ActivityRun], start_ns: int) -> list[tuple[int, Steps]]:
    """Every step of the activities that mark them, with the time each is delivered, in order."""
    out: list[tuple[int, Steps]] = []
    for a in activities:
        if not a.steps or a.phase is None or len(a.starts) < 2:
            continue
        period = float(a.starts[1] - a.starts[0])
        hosts = dict(enumerate(a.phase.hosts))
        for n, (begin, end) in enumerate(zip(a.starts[:-1].tolist(), a.starts[1:].tolist(), strict=True)):
            if end - begin >= HANG_STEPS * period:
                continue
            begin_ns, dur_ns = start_ns + round(begin * NS), round((end - begin) * NS)
            steps = [Step(n, rank, begin_ns, dur_ns) for rank in hosts]
            out.append((begin_ns + dur_ns, Steps(a.job, begin_ns, steps, hosts, source="sim")))
    return sorted(out, key=lambda t: t[0])
