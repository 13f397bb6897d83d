"""Fabric simulator: a leaf-spine RoCE fabric under training traffic, with labelled faults, into a trace.

``load_scenario`` reads and validates a scenario (YAML, documented in ``docs/scenarios.md``);
``simulate`` writes the topology, the ground-truth labels, job phases and every device's counter
snapshots to a trace. The same scenario and seed always give the same bytes.
"""

from fabricwatch.ingest.simulator.run import SimStats, simulate
from fabricwatch.ingest.simulator.scenario import Scenario, ScenarioError, load_scenario

__all__ = ["Scenario", "ScenarioError", "SimStats", "load_scenario", "simulate"]
