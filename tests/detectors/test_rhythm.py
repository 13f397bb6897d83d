"""Issue 36, item 4 (its core): the period a job's traffic repeats with, read from port byte rates
alone; none in noise; gaps left out rather than read as silence."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch.detectors.rhythm import rhythm
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Snapshot, decode
from fabricwatch.schemas.trace import TraceReader

SCENARIO = """\
name: rhythm
seed: 36
duration: 180
poll_interval: 0.5
fabric: {leaves: 2, spines: 4, hosts_per_leaf: 8}
collector: {noise: 0.03, jitter_ms: 10}
jobs:
  - name: train
    hosts: 16
    schedule:
      - {op: AllReduce, begin: 0, end: 180, load: 0.6, burst: {duration: 1.2, period: 4.5}}
"""


def test_a_jobs_step_is_found_in_its_hosts_byte_rates(tmp_path):
    """Each 4.5 s step the job's AllReduce runs for 1.2 s: every host's NIC repeats with it."""
    path = tmp_path / "rhythm.yaml"
    path.write_text(SCENARIO)
    simulate(load_scenario(path), tmp_path / "trace")
    sent: dict[str, list[tuple[int, int]]] = {}
    with TraceReader(tmp_path / "trace") as reader:
        for rec in reader:
            if rec.topic == topics.COUNTERS and rec.key.startswith("h"):
                snap = decode(rec.value(), Snapshot)
                values, _ = snap.matrix()
                col = [c.name for c in snap.counters].index("tx_bytes")
                sent.setdefault(snap.device, []).append((snap.ts_ns, int(values[0, col])))
    periods = []
    for polls in sent.values():
        t, total = np.array(polls, dtype=np.float64).T
        found = rhythm(np.diff(total) / np.diff(t / 1e9), 0.5)
        assert found is not None and found.strength > 0.5
        periods.append(found.period_s)
    assert len(periods) == 16 and all(p == pytest.approx(4.5, abs=0.5) for p in periods)


def test_noise_has_no_rhythm_and_gaps_are_left_out():
    rng = np.random.default_rng(36)
    assert rhythm(rng.standard_normal(600), 1.0) is None
    t = np.arange(600.0)
    steps = np.where(t % 6 < 2, 1.0, 0.1) + 0.05 * rng.standard_normal(600)
    gappy = np.where(rng.random(600) < 0.25, np.nan, steps)  # a quarter of the polls read nothing
    assert rhythm(gappy, 1.0).period_s == pytest.approx(6.0, abs=0.05)
    assert rhythm(np.where(np.isnan(gappy), 0.0, gappy), 1.0).strength < rhythm(gappy, 1.0).strength
    assert rhythm(np.full(600, 3.0), 1.0) is None


def test_a_period_between_two_polls_is_read_between_them():
    """7.5 s steps polled every second: the autocorrelation peaks at 7 and 8 alike; the parabola
    through the peak reads 7.5 within a tenth (a stretch of a fifth from 6 s is plain)."""
    rng = np.random.default_rng(7)
    t = np.arange(0.0, 240.0, 0.05)
    fine = np.where(t % 7.5 < 2.0, 1.0, 0.1)
    polled = fine.reshape(-1, 20).mean(axis=1) + 0.03 * rng.standard_normal(240)
    assert rhythm(polled, 1.0).period_s == pytest.approx(7.5, abs=0.1)
