"""Simulate then replay every shipped scenario through the whole in-process pipeline, and score the
anomalies against the scenario's ground truth: what a user of `fabricwatch demo` relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.paths import SCENARIOS

from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import ReplayResult, replay_trace

pytestmark = pytest.mark.slow  # whole scenarios replayed

RULE_KINDS = {"incast", "pfc_storm", "ecmp_collapse"}
"""What the rule-based detectors promise; ``outlier`` labels wait for the learned detector."""


def simulated_replay(name: str, tmp_path: Path) -> ReplayResult:
    trace = tmp_path / f"{name}.trace.gz"
    simulate(load_scenario(SCENARIOS / f"{name}.yaml"), trace)
    return replay_trace(trace, Pipeline())


@pytest.mark.parametrize("name", ["demo", "incast", "pfc_storm", "ecmp_collapse", "noisy"])
def test_every_fault_is_found_once_at_its_root_and_nothing_else_alerts(name, tmp_path):
    result = simulated_replay(name, tmp_path)
    assert result.pipeline.stats.dead_letters == 0 and result.malformed_lines == 0
    ev = result.evaluation()
    faults = {lb.kind for lb in result.pipeline.labels} & RULE_KINDS
    assert faults, "every fault scenario has at least one rule-detectable fault"
    for kind in faults:
        s = ev.kinds[kind]
        assert (s.recall, s.precision, s.localisation) == (1.0, 1.0, 1.0), (kind, s)
    assert ev.false_alerts == 0


def test_benign_look_alikes_raise_no_incident_and_only_the_findings_their_traffic_makes(tmp_path):
    """No look-alike pages. Their All-to-All's bursts, one every 2 s into one receiver, fill its
    queue often enough to be a microburst finding: labelled by the simulator from its queues, a
    finding, not an incident."""
    result = simulated_replay("benign", tmp_path)
    labels = result.pipeline.labels
    assert {lb.kind for lb in labels} == {"benign", "microbursts"}
    assert result.anomalies and all(a.finding for a in result.anomalies)
    findings = {(a.kind, a.root.device, a.root.port) for a in result.anomalies}
    assert findings == {(lb.kind, lb.root.device, lb.root.port) for lb in labels if lb.kind != "benign"}


def test_demo_alerts_name_the_job_the_collective_and_the_root(tmp_path):
    result = simulated_replay("demo", tmp_path)
    firing = {a.kind: a for a in result.anomalies if a.status == "firing"}
    assert firing.keys() == RULE_KINDS
    incast = firing["incast"]
    assert incast.jobs[0] == "moe-b" and incast.collectives[0].startswith("Reduce comm 0x")
    assert incast.root.device == "leaf01" and "h013" in incast.hosts
    assert (
        firing["ecmp_collapse"].jobs[0] == "pp-d" and firing["ecmp_collapse"].root.group == "leaf02/uplinks"
    )
    storm = firing["pfc_storm"]
    assert (storm.root.device, storm.root.port, storm.root.priority) == ("h002/mlx5_0", "1", 3)
    assert all(a.hint for a in result.anomalies)
    resolved = {a.fingerprint for a in result.anomalies if a.status == "resolved"}
    assert resolved == {a.fingerprint for a in firing.values()}
