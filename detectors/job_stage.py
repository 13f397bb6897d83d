"""The job stage: each job's communicators judged by the job detectors (``spec.Detector.job``),
their findings made incidents, each joined to the fabric incident that explains it.

Given a job's timed calls (``Collectives``), its steps (``Steps``), its phases and the fabric's
incidents as stage 2 publishes them. A finding of a job is explained by a fabric incident open on
the job: one that names the job (stage 2 attributes incidents to the jobs running on their hosts) or
touches one of its hosts, the one that began closest to when the job felt it; or, for a slowdown or
a hang, a straggler of the same communicator. The incident then says so (``caused_by``: the alerter
pages the cause, once). A slowdown or a hang that nothing explains yet waits ``EXPLAIN_WAIT_NS`` for
its cause, then fires saying so; a cause found later still (a slow link is checked every 10 s, a job
feels it at its next call) is named by an ``updated``. A finding no longer returned resolves the
incident.

One owner per job: in process it is the pipeline; streaming, the stage keyed by job (phases and
timed calls are keyed by job on ``fabric.phases``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from fabricwatch.detectors.job_calls import CommCalls
from fabricwatch.detectors.job_steps import JobSteps
from fabricwatch.detectors.registry import REGISTRY, Registry
from fabricwatch.detectors.spec import JobDetector, JobFinding, StepJudge
from fabricwatch.schemas.messages import Anomaly, Collectives, Phase, Steps

JOB_KINDS = ("job_slowdown", "job_straggler", "job_hang")
EXPLAIN_WAIT_NS = 5_000_000_000
"""How long a slowdown or a hang that nothing explains yet waits for its cause before it fires on
its own: a straggler is named after 7 of 10 calls, a call or two after the job's slowdown is
felt (found in the suite: every straggler's slowdown paged alone, a second before it)."""
CHECK_EVERY_NS = 500_000_000
"""Between new calls, how often the communicators are judged again (a hang is found by silence)."""


@dataclass
class _Open:
    finding: JobFinding
    fingerprint: str
    caused_by: str
    cause: str


class JobStage:
    def __init__(self, config: Any, registry: Registry = REGISTRY) -> None:
        self.detectors: list[JobDetector] = [d.job(config) for d in registry.detectors if d.job is not None]
        self.step_judges = [d for d in self.detectors if isinstance(d, StepJudge)]
        self._comms: dict[tuple[str, str], CommCalls] = {}
        self._steps: dict[str, JobSteps] = {}
        self._fabric: dict[str, Anomaly] = {}
        """Open fabric incidents by fingerprint, their latest event."""
        self._open: dict[str, _Open] = {}
        self._fresh = False
        self._next_ns = 0
        self._waiting: dict[str, int] = {}
        """Findings that nothing explains yet, since when they wait (``EXPLAIN_WAIT_NS``)."""

    def on_collectives(self, msg: Collectives) -> None:
        key = (msg.job, msg.comm)
        comm = self._comms.get(key)
        if comm is None:
            comm = self._comms[key] = CommCalls(msg.job, msg.comm, msg.nranks)
        comm.add(msg)
        self._fresh = True

    def on_steps(self, msg: Steps) -> None:
        self._steps.setdefault(msg.job, JobSteps(msg.job)).add(msg)
        self._fresh = True

    def on_phase(self, msg: Phase) -> None:
        comm = self._comms.get((msg.job, msg.comm))
        if comm is None:
            comm = self._comms[(msg.job, msg.comm)] = CommCalls(msg.job, msg.comm, len(msg.participants()))
        comm.on_phase(msg.begin_ns, msg.end_ns)

    def on_fabric(self, events: list[Anomaly]) -> None:
        """The fabric's incident events (stage 2's): which are open."""
        for a in events:
            if a.kind in JOB_KINDS:
                continue
            if a.status == "resolved":
                self._fabric.pop(a.fingerprint, None)
            else:
                self._fabric[a.fingerprint] = a

    def forget(self, jobs: set[str]) -> None:
        """Drop jobs another owner judges now (streaming, ``streams/job_worker.py``), their open
        incidents unresolved: the new owner carries them on under the same fingerprints."""
        self._comms = {k: c for k, c in self._comms.items() if k[0] not in jobs}
        self._steps = {j: s for j, s in self._steps.items() if j not in jobs}
        self._open = {i: o for i, o in self._open.items() if o.finding.job not in jobs}
        self._waiting = {i: t for i, t in self._waiting.items() if i.split("|", 2)[1] not in jobs}

    def evaluate(self, now_ns: int) -> list[Anomaly]:
        """The job incidents that fired, changed or resolved as of ``now_ns``: judged when new calls
        came, else every ``CHECK_EVERY_NS`` (stage 2 ticks far more often)."""
        if not (self._comms or self._steps) or not (self._fresh or now_ns >= self._next_ns):
            return []
        self._fresh, self._next_ns = False, now_ns + CHECK_EVERY_NS
        found: dict[str, JobFinding] = {}
        for comm in self._comms.values():
            for detector in self.detectors:
                for f in detector.check(comm, now_ns):
                    found[f"{f.kind}|{f.job}|{f.comm}|{f.key}"] = f
        for steps in self._steps.values():
            for judge in self.step_judges:
                for f in judge.check_steps(steps, now_ns):
                    found[f"{f.kind}|{f.job}|{f.comm}|{f.key}"] = f
        out = []
        self._waiting = {i: t for i, t in self._waiting.items() if i in found}
        for ident in [i for i in self._open if i not in found]:
            gone = self._open.pop(ident)
            out.append(self._anomaly(gone, "resolved", now_ns))
        stragglers = {(f.job, f.comm): i for i, f in found.items() if f.kind == "job_straggler"}
        for ident, f in sorted(found.items(), key=lambda item: item[1].kind != "job_straggler"):
            known = self._open.get(ident)
            if known is None:
                caused_by, cause = self._cause(f, stragglers)
                waited = now_ns - self._waiting.setdefault(ident, now_ns)
                if not caused_by and f.kind != "job_straggler" and waited < EXPLAIN_WAIT_NS:
                    continue
                self._waiting.pop(ident, None)
                known = self._open[ident] = _Open(f, _fingerprint(ident), caused_by, cause)
                out.append(self._anomaly(known, "firing", now_ns))
                continue
            before = (known.finding.severity, known.finding.root, known.caused_by)
            known.finding = f
            if not known.caused_by:
                # A fabric fault found after the job felt it (a slow link is checked every 10 s,
                # the job feels it at its next call): the job's incident names it once known.
                known.caused_by, known.cause = self._cause(f, stragglers)
            if (f.severity, f.root, known.caused_by) != before:
                out.append(self._anomaly(known, "updated", now_ns))
        return out

    def _cause(self, f: JobFinding, stragglers: dict[tuple[str, str], str]) -> tuple[str, str]:
        """The fabric incident open on the finding's job or hosts that began closest to when the
        job felt it (an older one still open, a slow link that has not healed, is not what made
        it slow now), else a straggler of the same communicator for a slowdown or a hang: its
        fingerprint and what it is."""
        touching = sorted(
            (abs(a.start_ns - f.start_ns), fp, a) for fp, a in self._fabric.items() if _explains(a, f)
        )
        if touching:
            _, fp, a = touching[0]
            at = f"{a.root.device} {a.root.port}".strip()
            return fp, f"{a.kind.replace('_', ' ')} at {at}"
        straggler = stragglers.get((f.job, f.comm))
        if f.kind != "job_straggler" and straggler is not None and straggler in self._open:
            s = self._open[straggler]
            return (
                s.fingerprint,
                f"straggler, rank {s.finding.evidence.get('rank')} on {s.finding.root.device}",
            )
        return "", ""

    def _anomaly(self, o: _Open, status: str, now_ns: int) -> Anomaly:
        f = o.finding
        explained = f"; caused by the {o.cause}" if o.cause else "; nothing in the fabric explains it"
        hint = f.hint or (
            f"See the {o.cause}, which explains it."
            if o.cause
            else "Nothing in the fabric: look at the job's hosts."
        )
        return Anomaly(
            fingerprint=o.fingerprint,
            kind=f.kind,
            severity=f.severity,  # type: ignore[arg-type]
            status=status,  # type: ignore[arg-type]
            start_ns=f.start_ns,
            ts_ns=now_ns,
            root=f.root,
            summary=f.summary + explained,
            hint=hint,
            end_ns=now_ns if status == "resolved" else None,
            hosts=list(f.hosts),
            jobs=[f.job],
            collectives=[f.collective] if f.collective else [],
            evidence={**f.evidence, **({"caused_by": o.cause} if o.cause else {})},
            caused_by=o.caused_by,
        )


def _explains(a: Anomaly, f: JobFinding) -> bool:
    """Whether fabric incident ``a`` is on the finding's job: one it names, or on one of its hosts.
    A straggler is one host's doing: only a fault at that host itself (its NIC ``host/nic``, as
    collectors name them, or the host) explains it, not one elsewhere on the job, which slows
    every rank alike, nor one whose listed hosts are the whole job's."""
    if f.kind == "job_straggler":
        return bool(set(f.hosts) & {d.split("/", 1)[0] for d in (a.root.device, *a.devices)})
    return f.job in a.jobs or bool(set(f.hosts) & {*a.hosts, *a.devices})


def _fingerprint(ident: str) -> str:
    return hashlib.sha256(ident.encode()).hexdigest()[:16]
