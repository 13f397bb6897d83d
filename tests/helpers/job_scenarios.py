"""Two jobs on a 16-host fabric whose collectives run at the pace the fabric lets them, with the
faults a test names: what the job health tests replay (issue 35)."""

from __future__ import annotations

from pathlib import Path

from fabricwatch.detectors.job_stage import JOB_KINDS
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas.messages import Anomaly

SCENARIO = """\
name: {name}
seed: 35
duration: {duration}
poll_interval: 1.0
fabric: {{leaves: 2, spines: 4, hosts_per_leaf: 8}}
collector: {{noise: 0.03, jitter_ms: 10}}
jobs:
  - name: llm-a
    hosts: 16
    schedule:
{schedule}
  - name: moe-b
    hosts: [h004, h005, h006, h012]
    schedule:
      - {{op: AllToAll, begin: 0, end: {duration}, load: 0.3}}
faults:
{faults}
"""
STORM = "  - {kind: pfc_storm, root: h003, start: 20, duration: 10}"
"""A storm rooted at one of llm-a's hosts, holding its AllReduce for 10 s: the job's hang."""
STRAGGLER = "  - {kind: straggler, host: h009, job: llm-a, delay: 0.05, start: 30, duration: 20}"
"""A host of llm-a entering its AllReduce 50 ms late from 30 s: a straggler and the slowdown it causes."""
STEADY = (
    "      - {{op: AllReduce, begin: 0, end: {duration}, load: 0.5, calls: {{bytes: 268435456, gap: 0.2}}}}"
)


def job_trace(
    tmp_path: Path,
    name: str,
    faults: str,
    duration: int = 60,
    schedule: str = "",
    start_ns: int | None = None,
) -> Path:
    """The scenario simulated to ``<name>.trace.gz``: llm-a's steady AllReduces unless ``schedule``
    says otherwise, moe-b's AllToAll beside it, ``faults`` (YAML list items) in both; from
    ``start_ns`` if given (a store's raw table expires what is two days old)."""
    path = tmp_path / f"{name}.yaml"
    schedule = schedule or STEADY.format(duration=duration)
    path.write_text(SCENARIO.format(name=name, duration=duration, schedule=schedule, faults=faults or "  []"))
    trace = tmp_path / f"{name}.trace.gz"
    simulate(load_scenario(path, {} if start_ns is None else {"start_time": start_ns}), trace)
    return trace


def job_incidents(events: list[Anomaly], kinds: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """Each job incident event (kind, status, root) and the kind of the incident that caused it
    (``kinds``: by fingerprint)."""
    jobs = [a for a in events if a.kind in JOB_KINDS]
    return sorted((a.kind, a.status, a.root.device, kinds.get(a.caused_by, "")) for a in jobs)
