"""Stage 1 on batches (issue 16): the same rates and symptoms as one snapshot at a time.

The batch path stacks snapshots of one counter table into one numpy pass and skips the NIC
detectors on quiet NICs; neither may change a single rate, symptom or counter of the engine.
Checked on simulated traces full of what takes the general path: gaps, duplicates, late and
reordered snapshots, resets, wraps near 32 bits, noise, and every fault kind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.paths import SCENARIOS
from helpers.streaming import topology_and_snapshots

from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.ingest.simulator.run import simulate
from fabricwatch.ingest.simulator.scenario import load_scenario
from fabricwatch.schemas.messages import Snapshot, Topology

SCENARIOS = SCENARIOS / "eval"


DURATION_S = {"phy_health_1s_64h": 150, "link_down_1s_64h": 160}
"""Simulated seconds of a trace, 40 unless its faults show later (the paced checks, 10 s apart)."""
SHOWN = {
    "phy_health_1s_64h": {"fec_degrading", "link_slow", "optic_out_of_range", "pcie_stalled", "link_errors"},
    "drops_1s_64h": {"drops", "retransmitting"},
    "link_down_1s_64h": {"link_down"},
}
"""Kinds a trace must show: the paced detectors and those of rare events screen a batch's polls
(issue 37), and must judge those that see a fault."""


def messages(tmp_path: Path, name: str) -> tuple[Topology, list[Snapshot]]:
    trace = tmp_path / f"{name}.trace"
    simulate(load_scenario(SCENARIOS / f"{name}.yaml", {"duration": DURATION_S.get(name, 40)}), trace)
    return topology_and_snapshots(trace)


def same(a, b) -> bool:
    if a[0] is None or b[0] is None:
        return a[0] is b[0] and a[1] == b[1]
    fa, fb = a[0], b[0]
    return (
        (fa.device, fa.ts_ns, fa.dt_s, fa.ports) == (fb.device, fb.ts_ns, fb.dt_s, fb.ports)
        and np.array_equal(fa.values, fb.values, equal_nan=True)
        and a[1] == b[1]
    )


@pytest.mark.parametrize(
    "name",
    [
        "noisy_counters_100ms_16h",
        "gaps_100ms_32h",
        "resets_during_storm",
        "incast_1s_64h",
        "gaugeless_1s_64h",
        "switch_stall_200ms_64h",
        "phy_health_1s_64h",
        "drops_1s_64h",
        "link_down_1s_64h",
    ],
)
@pytest.mark.parametrize("batch", [1, 7, 500])
def test_batches_give_what_one_at_a_time_gives(tmp_path, name, batch):
    topology, snaps = messages(tmp_path, name)
    one, many = Stage1(), Stage1()
    one.set_topology(topology)
    many.set_topology(topology)
    expected = [one.process(s) for s in snaps]
    got = []
    for i in range(0, len(snaps), batch):
        got += many.process_batch(snaps[i : i + batch])
    assert len(got) == len(expected)
    differ = [i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if not same(a, b)]
    assert not differ, f"{len(differ)} differ, first at {differ[0]}: {snaps[differ[0]].device}"
    assert sum(len(s) for _, s in got) > 0, "the trace's faults gave symptoms"
    assert SHOWN.get(name, set()) <= {s.kind for _, symptoms in got for s in symptoms}
    assert one.rates.stats == many.rates.stats
    devices = {s.device for s in snaps}
    assert all(one.windows(d) == many.windows(d) for d in devices), "the detectors' windows differ"
    assert any(one.windows(d) for d in devices)
