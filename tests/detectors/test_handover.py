"""A pod's stage 2 handed to another worker mid-incident (a rebalance, a restart): the new owner
adopts the open incidents from the anomalies it is given (``Correlator.adopt``), so it neither
fires them again nor leaves one that ended during the handover open forever."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.paths import SCENARIOS

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.stage2 import Stage2
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas.messages import Anomaly
from fabricwatch.schemas.trace import TraceReader

NS = 1_000_000_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("handover") / "demo.trace.gz"
    simulate(load_scenario(SCENARIOS / "demo.yaml", {"duration": 150}), path)
    return path


def replay(path: Path, hand_over_at_s: float | None = None, adopt: bool = True) -> list[Anomaly]:
    """The in-process pipeline, its stage 2 replaced at ``hand_over_at_s`` by a new owner that
    knows the topology and, with ``adopt``, the anomalies published so far."""
    pipeline, out, t0 = Pipeline(DetectorConfig()), [], None
    with TraceReader(path) as reader:
        for rec in reader:
            t0 = t0 or rec.ts_ns
            if hand_over_at_s is not None and rec.ts_ns - t0 >= hand_over_at_s * NS:
                new = Stage2(DetectorConfig())
                new.set_topology(pipeline.topology.merged())
                new.ticker = pipeline.stage2.ticker
                if adopt:
                    new.correlator.adopt(out, lambda device: True)
                pipeline.stage2, hand_over_at_s = new, None
            out += pipeline.feed(rec.topic, rec.ts_ns, rec.value())
    return out + pipeline.finish()


def lifecycle(events: list[Anomaly]) -> list[tuple[str, str, str]]:
    return sorted((a.kind, a.root.device, a.status) for a in events if a.status != "updated")


@pytest.mark.parametrize("at_s", [66.0, 78.0])
def test_a_new_owner_mid_storm_or_after_its_root_recovered_fires_nothing_twice_and_resolves_it(demo, at_s):
    """66 s: six seconds into h002's storm. 78 s: its root recovered at 75 s, leaves unwinding;
    a new owner that does not adopt never resolves the storm (nobody says it again)."""
    reference = lifecycle(replay(demo))
    assert ("pfc_storm", "h002/mlx5_0", "resolved") in reference
    assert lifecycle(replay(demo, at_s)) == reference
    assert ("pfc_storm", "h002/mlx5_0", "resolved") not in lifecycle(replay(demo, 78.0, adopt=False))


def test_a_new_owner_adopts_only_what_it_owns_and_nothing_resolved():
    from fabricwatch.detectors.incidents import Correlator
    from fabricwatch.schemas.messages import RootCause

    def event(fp: str, status: str, device: str, ts: int) -> Anomaly:
        return Anomaly(fp, "pfc_storm", "critical", status, 0, ts, RootCause(device, "1"), "s")

    correlator = Correlator()
    events = [
        event("a", "firing", "h001/mlx5_0", 1),
        event("a", "resolved", "h001/mlx5_0", 2),  # over before the handover: not adopted
        event("b", "firing", "h002/mlx5_0", 1),
        event("b", "updated", "h002/mlx5_0", 3),
        event("c", "firing", "h009/mlx5_0", 1),  # another pod's
        Anomaly("d", "kind_of_a_newer_build", "warning", "firing", 0, 1, RootCause("h002/mlx5_0"), "s"),
    ]
    assert correlator.adopt(events, lambda device: device != "h009/mlx5_0") == 1
    assert correlator.release(lambda device: False) == 1  # handed on: forgotten, not resolved
    assert correlator.tick(10 * NS) == []
