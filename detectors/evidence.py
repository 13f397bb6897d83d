"""Symptoms of one (port, priority) cell, and their evidence numbers: rounded, and only the ones
that are known.

A rate can be unknown (NaN) after a reset or a missing value; JSON has no NaN, and "unknown" is
better said by leaving the number out than by writing a zero that reads as a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fabricwatch.detectors.incident_state import Incident
from fabricwatch.detectors.rates import RateFrame
from fabricwatch.schemas.messages import Symptom


def evidence(digits: int = 4, **values: float | int | str) -> dict[str, float | int | str]:
    out: dict[str, float | int | str] = {}
    for key, v in values.items():
        if isinstance(v, str):
            out[key] = v
            continue
        f = float(v)
        if math.isfinite(f):
            out[key] = int(f) if isinstance(v, int) else round(f, digits)
    return out


def cell_symptom(
    kind: str,
    frame: RateFrame,
    shape: tuple[int, ...],
    flat: int,
    priorities: np.ndarray,
    since_ns: np.ndarray,
    active: bool,
    evidence_of: Callable[[int, int], dict[str, float | int | str]],
) -> Symptom:
    """The symptom of cell ``flat`` of a ports x priorities matrix of ``shape`` (the detectors keep
    their streaks in such matrices and report cells by flat index); ``evidence_of(port, column)``
    gives its evidence."""
    p, q = np.unravel_index(flat, shape)
    return Symptom(
        kind=kind,  # type: ignore[arg-type]
        device=frame.device,
        port=frame.ports[p],
        priority=int(priorities[q]),
        ts_ns=frame.ts_ns,
        start_ns=int(since_ns.flat[flat]),
        active=active,
        evidence=evidence_of(int(p), int(q)),
    )


def capped(names: list[str], shown: int = 8) -> str:
    """A list of names for an incident's evidence: the first ``shown`` and how many more."""
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def port_symptoms(
    kind: str,
    frame: RateFrame,
    since_ns: np.ndarray,
    reported: tuple[np.ndarray, np.ndarray, np.ndarray],
    evidence_of: Callable[[int], dict[str, float | int | str]],
    blind: str,
) -> list[Symptom]:
    """What a per-port detector says in a poll, from its ``(active, cleared, ended)`` masks: every
    active port again (stage 2 expires what is not said again), each port that cleared once, and
    each ended for lack of data once, saying why (``blind``)."""
    active, cleared, ended = reported
    if not (active.any() or cleared.any() or ended.any()):
        return []  # the common poll: one test, not three index lists

    def one(p: int, on: bool, why: str = "") -> Symptom:
        found = evidence_of(p)
        if why:
            found["ended"] = why
        return Symptom(
            kind=kind,
            device=frame.device,
            port=frame.ports[p],
            ts_ns=frame.ts_ns,
            start_ns=int(since_ns[p]),
            active=on,
            evidence=found,
        )

    out = [one(p, True) for p in np.flatnonzero(active).tolist()]
    out += [one(p, False) for p in np.flatnonzero(cleared).tolist()]
    return out + [one(p, False, blind) for p in np.flatnonzero(ended).tolist()]


def worst_so_far(incident: Incident, own: list[Symptom], peak: str) -> None:
    """An incident's ``peak`` evidence and severity are its worst over its life, never its latest
    symptom's: the largest ``peak`` of its own symptoms so far, and critical once any of them said
    so (stage 1 weighed each against its detector's critical bound). The symptoms' own
    ``severity`` is theirs, not evidence."""
    seen = max((float(s.evidence.get(peak, 0.0)) for s in own), default=0.0)
    incident.evidence[peak] = max(seen, float(incident.evidence.get(peak, 0.0)))
    if any(s.evidence.get("severity") == "critical" for s in own):
        incident.severity = "critical"
    incident.evidence.pop("severity", None)


def seen_now(incident: Incident, own: list[Symptom]) -> list[Symptom]:
    """An incident's own symptoms that still see its fault: an open one whose latest check did
    not (``recovering``, ``systematic.Step.recovering``) says nothing new, and the incident keeps
    what it said until it clears. Empty when there is nothing new to say; all of them when the
    incident has said nothing yet (it fires on a check that no longer saw it)."""
    now = [s for s in own if not s.evidence.get("recovering")]
    return now if now or incident.summary else own
