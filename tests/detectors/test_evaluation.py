"""Scoring: one credited incident per label; duplicates and unmatched incidents count against us."""

from __future__ import annotations

import msgspec

from fabricwatch.detectors.evaluation import evaluate
from fabricwatch.schemas.messages import Anomaly, Cause, Label, RootCause

S = 1_000_000_000
ROOT = RootCause("leaf0", "Ethernet0", 3)


def event(fp: str, status: str, ts: int, start: int, root: RootCause = ROOT, kind: str = "incast") -> Anomaly:
    end = ts if status == "resolved" else None
    return Anomaly(fp, kind, "warning", status, start, ts, root, "s", end_ns=end)


def test_duplicate_incident_on_one_fault_lowers_precision_but_not_recall():
    label = Label("incast", 10 * S, 30 * S, ROOT)
    anomalies = [
        event("a", "firing", 12 * S, 11 * S),
        event("b", "firing", 13 * S, 11 * S, RootCause("leaf0", "Ethernet8", 3)),
        event("a", "resolved", 31 * S, 11 * S),
        event("b", "resolved", 31 * S, 11 * S, RootCause("leaf0", "Ethernet8", 3)),
        event("c", "firing", 100 * S, 99 * S),
    ]
    ev = evaluate(anomalies, [label], poll_s=1.0, duration_s=3600)
    s = ev.kinds["incast"]
    assert (s.labels, s.incidents, s.duplicates, s.true_incidents) == (1, 3, 1, 1)
    assert s.recall == 1.0 and s.localisation == 1.0 and abs(s.precision - 1 / 3) < 1e-9
    assert s.delays_s == [2.0]
    assert ev.false_alerts == 1 and ev.false_alerts_per_hour == 1.0


def test_wrong_root_is_detected_but_not_localised_and_benign_labels_match_nothing():
    labels = [Label("incast", 10 * S, 30 * S, ROOT), Label("benign", 50 * S, 60 * S, ROOT)]
    anomalies = [
        event("x", "firing", 12 * S, 11 * S, RootCause("leaf1", "Ethernet0", 3)),
        event("y", "firing", 52 * S, 51 * S),
    ]
    ev = evaluate(anomalies, labels, poll_s=1.0, duration_s=60)
    s = ev.kinds["incast"]
    assert s.recall == 1.0 and s.localisation == 0.0
    assert ev.false_alerts == 1


def test_two_faults_at_once_merged_into_one_incident_find_only_one():
    """Two incasts at once, reported as one incident at the first's root: the second is missed,
    not found through its neighbour's incident; each found fault's delay is its own incident's."""
    other = RootCause("leaf1", "Ethernet0", 3)
    labels = [Label("incast", 10 * S, 30 * S, ROOT), Label("incast", 14 * S, 30 * S, other)]
    merged = [event("a", "firing", 11 * S, 10 * S), event("a", "resolved", 31 * S, 10 * S)]
    s = evaluate(merged, labels, poll_s=1.0, duration_s=3600).kinds["incast"]
    assert (s.detected, s.recall) == (1, 0.5)

    both = [
        *merged,
        event("b", "firing", 16 * S, 15 * S, other),
        event("b", "resolved", 31 * S, 15 * S, other),
    ]
    s = evaluate(both, labels, poll_s=1.0, duration_s=3600).kinds["incast"]
    assert (s.detected, s.localised, s.duplicates) == (2, 2, 0)
    assert s.delays_s == [1.0, 2.0], "the second fault's delay is its own incident's, not its neighbour's"


def test_a_label_scored_alone_knows_the_faults_beside_it():
    """The per-label report scores one label at a time; the incident of a fault running beside it
    is that fault's, not a duplicate of this one (it failed overlapping_1s_64h under seeds 3 and 5)."""
    other = RootCause("leaf1", "Ethernet0", 3)
    labels = [Label("incast", 10 * S, 30 * S, ROOT), Label("incast", 14 * S, 30 * S, other)]
    both = [
        event("a", "firing", 11 * S, 10 * S),
        event("a", "resolved", 31 * S, 10 * S),
        event("b", "firing", 16 * S, 15 * S, other),
        event("b", "resolved", 31 * S, 15 * S, other),
    ]
    alone = evaluate(both, labels[1:], poll_s=1.0, duration_s=3600).kinds["incast"]
    assert alone.duplicates == 1, "without the context, the first fault's incident looks like a duplicate"
    among = evaluate(both, labels[1:], poll_s=1.0, duration_s=3600, context=labels).kinds["incast"]
    assert (among.detected, among.localised, among.duplicates) == (1, 1, 0)


def test_an_effect_is_localised_by_the_incident_it_is_linked_to_and_never_pages_alone():
    """Issue 35: a job slowed by an incast at its host is found when a slowdown of the job fires,
    localised only when it fired linked to that incast's incident; a linked slowdown that is no
    labelled effect lowers the kind's precision, but pages with its cause, so is no false alert."""
    job = RootCause("llm-a", group="job:llm-a")
    labels = [
        Label("incast", 10 * S, 30 * S, ROOT),
        Label("job_slowdown", 10 * S, 30 * S, job, cause=Cause("incast", ROOT)),
    ]

    def slowdown(fp: str, cause: str, at: int) -> list[Anomaly]:
        start = event(fp, "firing", at * S, at * S, job, "job_slowdown")
        return [
            msgspec.structs.replace(start, caused_by=cause),
            event(fp, "resolved", (at + 20) * S, at * S, job),
        ]

    incast = [event("i", "firing", 12 * S, 11 * S), event("i", "resolved", 31 * S, 11 * S)]
    elsewhere = RootCause("leaf1", "Ethernet0", 3)
    other = [
        event("o", "firing", 12 * S, 11 * S, elsewhere),
        event("o", "resolved", 31 * S, 11 * S, elsewhere),
    ]

    right = evaluate([*incast, *other, *slowdown("s", "i", 13)], labels, poll_s=1.0, duration_s=60)
    s = right.kinds["job_slowdown"]
    assert (s.detected, s.localised, s.precision, s.delays_s) == (1, 1, 1.0, [3.0])

    wrong = evaluate([*incast, *other, *slowdown("s", "o", 13)], labels, poll_s=1.0, duration_s=60)
    s = wrong.kinds["job_slowdown"]
    assert (s.detected, s.localised) == (1, 0)

    later = [
        event("x", "firing", 101 * S, 100 * S, elsewhere),
        event("x", "resolved", 120 * S, 100 * S, elsewhere),
    ]
    stray = evaluate([*incast, *later, *slowdown("s", "i", 13), *slowdown("t", "x", 101)], labels, 1.0, 200)
    s = stray.kinds["job_slowdown"]
    assert (s.incidents, s.true_incidents, s.precision) == (2, 1, 0.5)
    assert stray.false_alerts == 1  # the incast at leaf1, not the slowdown linked to it


def test_linked_incidents_of_a_kind_whose_effects_are_not_labelled_ride_with_their_cause():
    drops = [
        msgspec.structs.replace(event("d", "firing", 12 * S, 11 * S, kind="drops"), caused_by="i"),
        event("i", "firing", 12 * S, 11 * S),
    ]
    ev = evaluate(drops, [Label("incast", 10 * S, 30 * S, ROOT)], poll_s=1.0, duration_s=60)
    assert "drops" not in ev.kinds and ev.false_alerts == 0
