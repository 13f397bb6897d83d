"""Scoring: one credited incident per label; duplicates and unmatched incidents count against us."""

from __future__ import annotations

from fabricwatch.detectors.evaluation import evaluate
from fabricwatch.schemas.messages import Anomaly, Label, RootCause

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
