"""A small simulated fabric (2 leaves, 4 spines, 16 hosts running one AllReduce job) with the
faults a test gives it, replayed in process: what a detector's tests start from."""

from __future__ import annotations

from pathlib import Path

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Anomaly

SCENARIO = """\
name: {name}
seed: {seed}
duration: {duration}
poll_interval: {poll}
fabric: {{leaves: 2, spines: 4, hosts_per_leaf: 8}}
collector: {{noise: 0.03, jitter_ms: 10{collector}}}
jobs:
  - name: dp
    hosts: 16
    schedule:
      - {{op: AllReduce, begin: 0, end: {duration}, load: 0.35}}
faults:
{faults}
"""


def replayed(
    tmp_path: Path,
    name: str,
    faults: str,
    seed: int,
    duration: int,
    collector: str = "",
    poll_s: float = 1.0,
) -> list[Anomaly]:
    """Every anomaly event found in the scenario. ``faults``: YAML list items (indented two
    spaces) or empty; ``collector``: more collector keys, each after a comma."""
    scenario = tmp_path / f"{name}.yaml"
    text = SCENARIO.format(
        name=name, seed=seed, duration=duration, poll=poll_s, collector=collector, faults=faults or "  []"
    )
    scenario.write_text(text)
    trace = tmp_path / f"{name}.trace.gz"
    simulate(load_scenario(scenario), trace)
    return replay_trace(trace, Pipeline(DetectorConfig())).anomalies
