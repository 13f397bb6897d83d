"""Real records of jobs' collectives shaped as their tools write them, for the import tests."""

from __future__ import annotations

import json
import re

from fabricwatch.ingest.phases.formats import records
from fabricwatch.ingest.phases.steps import StepMark, step_messages
from fabricwatch.schemas.messages import Collectives, Steps, Timed
from helpers.paths import FIXTURES

INSPECTOR_EXAMPLES = (
    "nccl_inspector_output_readme_example.json",
    "nccl_inspector_output_verbose_readme_example.json",
)


def flight_recorder_json() -> str:
    """The PyTorch tutorial's unpickled Flight Recorder dump as the JSON form of the dump writes it:
    the tuple a list, the tutorial's ``...`` (more entries left out) dropped."""
    text = (FIXTURES / "pytorch_flight_recorder_unpickled_dump_tutorial_example.txt").read_text()
    text = text.replace('("0", "default_pg")', '["0", "default_pg"]')
    return re.sub(r",\s*\.\.\.\s*\]", "]", text)


def inspector_examples() -> list[dict]:
    """The NCCL Inspector README's two records: an AllReduce and a ReduceScatter over 8 ranks, with
    the bandwidths the Inspector computed for them."""
    return [json.loads((FIXTURES / name).read_text()) for name in INSPECTOR_EXAMPLES]


def inspector_example_calls(job: str, t0: int) -> list[Collectives]:
    """The README's records as timed calls of ``job``, the first at ``t0``."""
    return [
        Collectives(
            job=job,
            comm=r["header"]["id"],
            nranks=r["header"]["n_ranks"],
            ts_ns=t0 + i,
            calls=[
                Timed(
                    r["coll_perf"]["coll"],
                    r["header"]["rank"],
                    r["coll_perf"]["coll_msg_size_bytes"],
                    t0 + i,
                    r["coll_perf"]["coll_exec_time_us"] * 1000,
                )
            ],
            rank_hosts={r["header"]["rank"]: r["metadata"]["hostname"]},
            source="inspector",
        )
        for i, r in enumerate(inspector_examples())
    ]


KINETO_STEPS = "kineto_trace_profilerstep_nccl_a100_ddp_3steps_hta.json"
"""A real DDP trace's three steps with their NCCL kernels (tests/fixtures/SOURCES.md)."""


def kineto_example_steps(job: str, t0: int) -> Steps:
    """The trace's three steps as ``phases import`` reads them, moved to begin at ``t0``."""
    text = (FIXTURES / KINETO_STEPS).read_text()
    marks = [r for r in records("kineto", text, "gpu0", []) if isinstance(r, StepMark)]
    shift = t0 - marks[0].begin_ns
    (steps,) = step_messages(job, "kineto", [m._replace(begin_ns=m.begin_ns + shift) for m in marks])
    return steps


def flight_recorder_dump(
    rank: int, completed: int, scheduled: int | None = None, every_s: float = 1.0
) -> str:
    """A rank's dump shaped as the tutorial's: its one real entry (an AllReduce of 3x4 floats)
    repeated as calls 1 to ``completed``, ``every_s`` apart, 39 ms each, and call ``scheduled``
    entered and not completed, as a rank stuck in it is dumped (torchfrtrace then says "missing
    ranks" of whoever has no entry for it)."""
    doc = json.loads(flight_recorder_json())
    (entry,) = doc["entries"]
    doc["rank"] = rank
    created = entry["time_created_ns"]
    entries = []
    for seq in [*range(1, completed + 1), *([scheduled] if scheduled else [])]:
        at = created + round((seq - 1) * every_s * 1e9)
        done = seq <= completed
        entries.append(
            {
                **entry,
                "record_id": seq - 1,
                "collective_seq_id": seq,
                "op_id": seq,
                "time_created_ns": at,
                "state": "completed" if done else "scheduled",
                "time_discovered_completed_ns": at + 39_036_605 if done else None,
                "retired": done,
            }
        )
    doc["entries"] = entries
    return json.dumps(doc)
