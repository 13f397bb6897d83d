"""Issue 36, item 4: a job's rhythm read from its NICs' byte rates alone; a period that stretches
and traffic that stops are findings, rooted at the job; a checkpoint's pause, gaps, a job that
ends and traffic without a rhythm are not."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import zhejiang
from helpers.recorders import as_stage1_runs

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.detectors.traffic_rhythm import RhythmConfig, TrafficRhythm
from fabricwatch.detectors.windows import WindowError
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CounterSpec, Periods, Snapshot, Symptom, decode, encode
from fabricwatch.schemas.topology import Device, Topology
from fabricwatch.streams.stages import Stage1Worker

NS = 1_000_000_000
T0 = 1_767_225_600 * NS
SPECS = (CounterSpec("tx_bytes", "counter", 64), CounterSpec("rx_bytes", "counter", 64))


def steps(t: np.ndarray, period_s: float, on_s: float = 1.5) -> np.ndarray:
    """A NIC's bytes a second, polled every second, when the job's collectives run ``on_s`` of each
    ``period_s`` step at 20 GB/s (averaged over each poll, as a counter read each second is)."""
    fine = np.arange(0, 1, 0.05)
    on = ((t[:, None] + fine) % period_s) < on_s
    rng = np.random.default_rng(int(period_s * 10))
    return 2e10 * on.mean(axis=1) + 2e8 * rng.random(len(t))


def run(rates: np.ndarray, detector: TrafficRhythm | None = None) -> list[Symptom]:
    """One NIC polled every second, as stage 1 gives it (every poll noted, a check when due);
    NaN: a poll that read nothing."""
    return run_from(rates, 0, detector or TrafficRhythm(RhythmConfig()))


def run_from(rates: np.ndarray, start_s: int, detector: TrafficRhythm) -> list[Symptom]:
    fab, said = FabricMap(Topology(ts_ns=T0, devices=[Device("h001/mlx5_0", "nic")], links=[])), []
    for t, rate in enumerate(rates[start_s:], start=start_s):
        values = np.array([[rate / 2, rate / 2]])
        frame = RateFrame("h001/mlx5_0", "nic", T0 + t * NS, 1.0, ["1"], Layout.of(SPECS), values)
        said += as_stage1_runs(detector, Poll(frame, np.array([5e10]), fab))
    return said


def changes(said: list[Symptom]) -> list[tuple[str, bool, int]]:
    """Each change of state: (what, on, second)."""
    out, last = [], {}
    for s in said:
        if last.get(s.group) != s.active:
            out.append((s.group, s.active, (s.ts_ns - T0) // NS))
            last[s.group] = s.active
    return out


def test_steps_that_take_longer_are_a_stretch_and_clear_when_they_are_back():
    t = np.arange(1500.0)
    rates = np.where((t >= 500) & (t < 900), steps(t, 7.8), steps(t, 6.0))
    said = run(rates)
    (on, off) = changes(said)
    c = RhythmConfig()
    bound = c.window_s + (c.confirm + 1) * c.every_s
    assert on[:2] == ("stretched", True) and 500 < on[2] <= 500 + bound
    assert off[:2] == ("stretched", False) and 900 < off[2] <= 900 + bound
    found = next(s for s in said if s.active)
    assert found.evidence["usual_period_s"] == pytest.approx(6.0, abs=0.1)


def test_traffic_that_stops_is_found_and_a_checkpoints_pause_is_not():
    t = np.arange(900.0)
    checkpoint = (t >= 300) & (t < 312)
    hang = (t >= 600) & (t < 750)
    rates = np.where(checkpoint | hang, 1e6, steps(t, 6.0))
    (on, off) = changes(run(rates))
    c = RhythmConfig()
    assert on[:2] == ("stopped", True) and 600 + c.stop_s <= on[2] <= 600 + c.stop_s + c.every_s
    assert off[:2] == ("stopped", False) and 750 < off[2] <= 750 + c.stop_s + c.every_s


def test_gaps_are_unknown_neither_a_stop_nor_a_change_and_noise_has_no_rhythm():
    t = np.arange(900.0)
    rng = np.random.default_rng(36)
    gappy = np.where(rng.random(900) < 0.3, np.nan, steps(t, 6.0))
    gappy[400:460] = np.nan  # a minute unread
    assert run(gappy) == []
    assert run(2e10 * rng.random(900)) == []  # no rhythm: nothing learned, nothing said


def test_a_period_read_at_a_multiple_of_the_usual_is_the_same_rhythm():
    """A step with two bursts of unequal size can read as its double when noise evens out the
    first peak; the traffic still repeats at the usual period, so it did not stretch."""
    t = np.arange(1200.0)
    small = ((t % 12.0) >= 6) & ((t % 12.0) < 7.5)
    rates = steps(t, 6.0) * np.where(small, 0.6, 1.0)
    assert [c for c in changes(run(rates)) if c[0] == "stretched"] == []


SCENARIO = """\
name: rhythm
seed: 364
duration: 900
poll_interval: 1.0
fabric: {leaves: 2, spines: 4, hosts_per_leaf: 8}
collector: {noise: 0.03, jitter_ms: 10}
jobs:
  - name: llm
    hosts: 8
    placement: consecutive
    schedule:
      - {op: AllReduce, begin: 0, end: 900, load: 0.6, burst: {duration: 1.5, period: 6.0}}
  - name: moe
    hosts: 4
    first_host: 8
    placement: consecutive
    schedule:
      - {op: AllToAll, begin: 0, end: 900, load: 0.4, burst: {duration: 1.0, period: 4.0}}
  - name: done
    hosts: 4
    first_host: 12
    placement: consecutive
    schedule:
      - {op: AllReduce, begin: 0, end: 500, load: 0.4, burst: {duration: 1.0, period: 5.0}}
faults:
  - {kind: step_stretch, job: llm, factor: 1.3, start: 400.4, duration: 500}
  - {kind: job_stop, job: moe, start: 500.7, duration: 400}
"""


def test_a_job_that_slows_and_a_job_that_hangs_are_one_finding_each_and_a_job_that_ends_none(tmp_path):
    """Through the whole pipeline from simulated counters: every NIC of llm stretches, one finding
    rooted at the job; moe's traffic stops while its phase stays open, one finding; done's phase
    closes at 500 s and its traffic with it: a job that ended, nothing said."""
    path = tmp_path / "rhythm.yaml"
    path.write_text(SCENARIO)
    simulate(load_scenario(path), tmp_path / "trace")
    events = [a for a in replay_trace(tmp_path / "trace", Pipeline()).anomalies if a.kind == "rhythm"]
    firing = {a.root.device: a for a in events if a.status == "firing"}
    assert sorted(firing) == ["llm", "moe"]
    assert len([a for a in events if a.status == "firing"]) == 2
    slow, hang = firing["llm"], firing["moe"]
    assert slow.finding and slow.jobs == ["llm"] and slow.severity == "info"
    assert slow.evidence["usual_period_s"] == pytest.approx(6.0, abs=0.2)
    assert "stretched from 6.0 s" in slow.summary
    assert hang.severity == "warning" and "traffic stopped" in hang.summary
    assert (hang.start_ns - T0) / NS == pytest.approx(500.7, abs=20)


def test_a_nics_rhythm_moves_to_another_worker_and_the_stretch_is_found_there():
    """Stage 1's windows (``detectors/windows.py``): the worker that takes a NIC over after a
    restart or a rebalance carries on with its usual period, rather than learning the stretched
    one as usual; one kept under another window is refused."""
    t = np.arange(1200.0)
    rates = np.where(t >= 500, steps(t, 7.8), steps(t, 6.0))
    first = TrafficRhythm(RhythmConfig())
    assert run(rates[:500], first) == []
    second = TrafficRhythm(RhythmConfig())
    second.restore_window("h001/mlx5_0", first.window_state("h001/mlx5_0"))
    said = [s for s in run_from(rates, 500, second) if s.active]
    assert said and said[0].group == "stretched"
    assert said[0].evidence["usual_period_s"] == pytest.approx(6.0, abs=0.1)
    fresh = [s for s in run_from(rates, 500, TrafficRhythm(RhythmConfig())) if s.active]
    assert fresh == []  # without it, 7.8 s is all it has seen: its usual period
    with pytest.raises(WindowError):
        TrafficRhythm(RhythmConfig(window_s=300)).restore_window(
            "h001/mlx5_0", first.window_state("h001/mlx5_0")
        )


@pytest.mark.parametrize("leaf", ["Leaf-1", "Leaf-2", "Leaf-3"])
def test_real_host_ports_read_as_nics_learn_rhythms_and_none_stretches(leaf):
    """Real production counters (Zhejiang Lab, ``helpers/zhejiang.py``): each host-facing leaf
    port's bytes, summed per second, stand for its NIC's. Some learn a rhythm (30 s is the
    commonest, as the estimator found); none stretches over the excerpt. A port whose traffic
    fell away may read stopped: with no job known to run there, stage 2 says nothing of it."""
    data = zhejiang.load(leaf)
    whole = np.floor(data.seconds()).astype(int)
    learned, said = 0, []
    for i, port in enumerate(data.ports):
        if not port.startswith("TwoHundredGigE"):
            continue
        read = ~np.isnan(data.deltas[:, i, 1])
        sent = np.nansum(data.deltas[:, i, [1, 3]], axis=1)
        per_s = np.bincount(whole[read], weights=sent[read], minlength=whole.max() + 1)
        seen = np.bincount(whole[read], minlength=whole.max() + 1) > 0
        detector = TrafficRhythm(RhythmConfig())
        said += run(np.where(seen, per_s, np.nan), detector)
        learned += any(np.isfinite(n.usual_s) for n in detector._nics.values())
    assert learned >= 3
    assert not [s for s in said if s.group == "stretched"]


def test_a_stretch_on_a_host_no_job_is_known_to_run_on_is_no_finding():
    """Found on the real leaves, which name no job: a port's 6 s rhythm read 16 s for minutes. The
    NIC says it stretched (stage 1); with no job whose phase ran through it, stage 2 says nothing:
    the mix of jobs on a host changes its rhythm as a slowdown does."""
    t = np.arange(1000.0)
    rates = np.where(t >= 400, steps(t, 7.8), steps(t, 6.0))
    sent = np.concatenate([[0.0], np.cumsum(rates)]).astype(np.int64) // 2
    pipeline, events = Pipeline(), []
    for i, total in enumerate(sent):
        snap = Snapshot("h001/mlx5_0", "nic", T0 + i * NS, list(SPECS), ["1"], [[int(total), int(total)]])
        events += pipeline.feed(topics.COUNTERS, snap.ts_ns, encode(snap))
    events += pipeline.finish()
    said = [s for s in run(rates) if s.active]
    assert said and said[0].group == "stretched"  # the NIC did stretch
    assert [a for a in events if a.kind == "rhythm"] == []


def test_every_judgment_that_reads_a_period_is_taken_for_the_store_once():
    """``fabric.rhythm``: the period at each judgment, not only when it changes, so that a job's
    rhythm can be drawn over time; a judgment with no rhythm sends nothing (unknown, not zero)."""
    t = np.arange(1200.0)
    detector = TrafficRhythm(RhythmConfig())
    run(np.where(t >= 600, steps(t, 7.8), steps(t, 6.0)), detector)
    (taken,) = detector.take_periods()
    assert detector.take_periods() == [], "taken once"
    assert set(taken.devices) == {"h001/mlx5_0"}
    at, period = (np.array(taken.ts_ns) - T0) / NS, np.array(taken.period_s)
    assert np.diff(at).min() >= RhythmConfig().every_s - 1
    assert np.median(period[at < 600]) == pytest.approx(6.0, abs=0.1)
    assert np.median(period[at >= 600 + RhythmConfig().window_s]) == pytest.approx(7.8, abs=0.2)
    assert taken.usual_s[0] is None, "read before a usual period was learned"
    assert taken.usual_s[-1] == pytest.approx(6.0, abs=0.1), "the stretch is said, not learned"
    noise = TrafficRhythm(RhythmConfig())
    run(2e9 + 1e9 * np.random.default_rng(5).random(600), noise)
    assert noise.take_periods() == []


def test_a_stage1_worker_sends_the_periods_for_the_store():
    """What ``fabric.rhythm`` carries from a worker, decoded as the sink decodes it."""
    t = np.arange(400)
    sent = np.cumsum(steps(t.astype(float), 6.0) / 2).astype(np.uint64)
    snaps = [
        encode(Snapshot("h001/mlx5_0", "nic", T0 + int(s) * NS, list(SPECS), ["1"], [[int(b), int(b)]]))
        for s, b in zip(t, sent, strict=True)
    ]
    worker, out = Stage1Worker(DetectorConfig()), []
    for i in range(0, len(snaps), 50):
        out += worker.process(snaps[i : i + 50], ["fabric.counters/0"] * len(snaps[i : i + 50])).periods
    said = [decode(k.value, Periods) for k in out]
    assert said and all(k.key == b"h001/mlx5_0" for k in out)
    assert [p for m in said for p in m.period_s] == pytest.approx(
        [6.0] * sum(len(m.devices) for m in said), abs=0.1
    )
    quiet = Stage1Worker(DetectorConfig(), rates=False)
    assert not [
        k
        for i in range(0, len(snaps), 50)
        for k in quiet.process(snaps[i : i + 50], ["fabric.counters/0"] * 50).periods
    ]
