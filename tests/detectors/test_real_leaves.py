"""Detection on real production counters: the Zhejiang Lab cluster's leaf switches (0.5 s samples
with gaps, each port refreshed about every second; CC-BY 4.0, ``fixtures/SOURCES.md``), with ECMP
collapses injected into that real background (issue 33, findings 1 and 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import zhejiang as zj

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Anomaly

NS = 1_000_000_000
START_S, END_S = 120.0, 420.0
ONE_INCIDENT = [("ecmp_collapse", "firing"), ("ecmp_collapse", "resolved")]


def replayed(tmp_path: Path, leaves: list[zj.Leaf]) -> list[Anomaly]:
    trace = zj.write_trace(leaves, tmp_path / "leaves.trace.gz")
    return replay_trace(trace, Pipeline(DetectorConfig())).anomalies


def after_start(leaf: zj.Leaf, a: Anomaly) -> float:
    return (a.ts_ns - int(leaf.times_ms[0]) * 1_000_000) / NS - START_S


@pytest.mark.parametrize("name", ["Leaf-1", "Leaf-2", "Leaf-3"])
def test_healthy_real_leaves_raise_nothing(tmp_path, name):
    assert replayed(tmp_path, [zj.load(name)]) == []


def test_a_saturating_collapse_in_real_counters_is_one_incident_found_within_10_s(tmp_path):
    """Before: found after 1.6 s, then resolved and fired again 16 times, each time on a poll in
    which the hot member read zero between two refreshes and the group carried nothing."""
    leaf = zj.load("Leaf-1")
    events = replayed(tmp_path, [zj.inject(leaf, zj.Collapse(START_S, END_S, 0.9))])
    assert [(a.kind, a.status) for a in events] == [
        ("ecmp_collapse", "firing"),
        ("ecmp_collapse", "resolved"),
    ]
    firing, resolved = events
    assert firing.root.device == "Leaf-1" and firing.root.group == "Leaf-1/uplinks"
    assert firing.severity == "critical" and after_start(leaf, firing) <= 10
    assert 0 <= after_start(leaf, resolved) - (END_S - START_S) <= 15
    assert "lack of data" not in resolved.summary  # it was seen to spread again


def test_a_collapse_below_saturation_is_one_warning_within_its_documented_bound(tmp_path):
    """Before: nothing at all (the streak restarted at every zero read of the hot member)."""
    leaf = zj.load("Leaf-1")
    events = replayed(tmp_path, [zj.inject(leaf, zj.Collapse(START_S, END_S, 0.43))])
    assert [(a.kind, a.status, a.severity) for a in events] == [
        ("ecmp_collapse", "firing", "warning"),
        ("ecmp_collapse", "resolved", "warning"),
    ]
    config = DetectorConfig().ecmp
    assert after_start(leaf, events[0]) <= config.polarised_persist_s + 5 * 0.5


def test_a_collapse_whose_group_then_carries_nothing_ends_for_lack_of_data(tmp_path):
    """A group with no traffic says nothing about its balance: the incident is held, then ends
    after lack_of_data_s saying so, neither resolved at the first empty poll nor open forever."""
    leaf = zj.inject(zj.load("Leaf-1"), zj.Collapse(START_S, END_S, 0.9))
    leaf = zj.inject(leaf, zj.Collapse(200.0, END_S, 0.0))  # from 200 s the uplinks send nothing
    events = replayed(tmp_path, [leaf])
    assert [(a.kind, a.status) for a in events] == [
        ("ecmp_collapse", "firing"),
        ("ecmp_collapse", "resolved"),
    ]
    ended = after_start(leaf, events[1]) - (200.0 - START_S)
    lack = DetectorConfig().ecmp.lack_of_data_s
    assert lack <= ended <= lack + 10, ended
    assert "ended for lack of data" in events[1].summary
