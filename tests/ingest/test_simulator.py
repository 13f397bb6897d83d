"""The fabric simulator: determinism, shipped scenarios, the physics users rely on, scenario errors."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import SCENARIOS

from fabricwatch.ingest.simulator import ScenarioError, load_scenario, simulate
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Label, Phase, Snapshot, Topology, decode
from fabricwatch.schemas.trace import TraceReader, read_labels

LINE_BYTES_PER_S = 400e9 / 8
KMIN = 150 * 1024


@dataclass
class Series:
    """One device's snapshots in delivery order: times (s from start), values (polls x ports x counters)."""

    t: np.ndarray
    values: np.ndarray
    ports: list[str]
    columns: dict[tuple[str, int | None], int]
    kinds: list[str]
    widths: list[int]

    def col(self, name: str, index: int | None = None, port: str | None = None) -> np.ndarray:
        p = 0 if port is None else self.ports.index(port)
        return self.values[:, p, self.columns[(name, index)]].astype(np.float64)

    def delta(self, name: str, index: int | None = None, port: str | None = None) -> np.ndarray:
        return np.diff(self.col(name, index, port))


@dataclass
class Trace:
    topology: Topology
    labels: list[Label]
    phases: list[Phase]
    devices: dict[str, Series]
    start_ns: int


def read_trace(path: Path) -> Trace:
    snaps: dict[str, list[Snapshot]] = defaultdict(list)
    topology, labels, phases = None, [], []
    with TraceReader(path) as reader:
        start_ns = reader.header.created_ns
        for rec in reader:
            msg = decode(rec.value())
            if isinstance(msg, Snapshot):
                snaps[msg.device].append(msg)
            elif isinstance(msg, Topology):
                topology = msg
            elif isinstance(msg, Label):
                labels.append(msg)
            elif isinstance(msg, Phase):
                phases.append(msg)
    devices = {}
    for name, lst in snaps.items():
        first = lst[0]
        devices[name] = Series(
            t=(np.array([s.ts_ns for s in lst]) - start_ns) / 1e9,
            values=np.stack([s.matrix()[0] for s in lst]),
            ports=first.ports,
            columns={(c.name, c.index): i for i, c in enumerate(first.counters)},
            kinds=[c.kind for c in first.counters],
            widths=[c.width for c in first.counters],
        )
    assert topology is not None
    return Trace(topology, labels, phases, devices, start_ns)


def run(tmp_path: Path, name: str, seed: int | None = None, tag: str = "", **overrides: object) -> Path:
    scenario = load_scenario(SCENARIOS / f"{name}.yaml", overrides=overrides)
    out = tmp_path / f"{name}-{seed}{tag}.trace"
    simulate(scenario, out, seed=seed)
    return out


def window(trace: Trace, label: Label) -> tuple[float, float]:
    return (label.start_ns - trace.start_ns) / 1e9, (label.end_ns - trace.start_ns) / 1e9


def inside(t: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Intervals (between consecutive polls, ending at t[1:]) lying wholly inside [lo, hi].

    Reads happen a few ms before each nominal poll time, so the poll at ``lo`` itself is outside.
    """
    return (t[:-1] >= lo) & (t[1:] <= hi)


def outside(t: np.ndarray, lo: float, hi: float, margin: float = 0.0) -> np.ndarray:
    """Intervals wholly before ``lo - margin`` or after ``hi + margin``."""
    return (t[1:] < lo - margin) | (t[:-1] > hi + margin)


# --- determinism -------------------------------------------------------------------------------


def test_same_seed_gives_byte_identical_trace(tmp_path: Path) -> None:
    a = run(tmp_path, "demo", tag="a", duration=40)
    b = run(tmp_path, "demo", tag="b", duration=40)
    assert a.read_bytes() == b.read_bytes()


def test_seed_changes_the_trace_and_overrides_the_file(tmp_path: Path) -> None:
    default = run(tmp_path, "demo", duration=10).read_bytes()
    assert run(tmp_path, "demo", seed=99, duration=10).read_bytes() != default
    scenario_seed = load_scenario(SCENARIOS / "demo.yaml").seed
    assert run(tmp_path, "demo", seed=scenario_seed, duration=10).read_bytes() == default


def test_gzip_output_is_reproducible(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS / "incast.yaml", overrides={"duration": 5})
    outs = [tmp_path / f"{i}.trace.gz" for i in range(2)]
    for out in outs:
        simulate(scenario, out)
    assert outs[0].read_bytes()[:2] == b"\x1f\x8b"
    assert outs[0].read_bytes() == outs[1].read_bytes()


# --- shipped scenarios -------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenario_simulates_to_a_valid_trace(path: Path, tmp_path: Path) -> None:
    scenario = load_scenario(path, overrides={"duration": 8})
    out = tmp_path / "t.trace"
    stats = simulate(scenario, out)
    assert stats.simulated_seconds == 8 and stats.snapshots > 0 and stats.values > stats.snapshots
    with TraceReader(out) as reader:
        records = list(reader)
    assert reader.malformed == 0 and len(records) == stats.records
    assert records[0].topic == topics.TOPOLOGY
    n_labels = sum(r.topic == topics.LABELS for r in records)
    assert all(r.topic == topics.LABELS for r in records[1 : 1 + n_labels])
    assert [r.ts_ns for r in records] == sorted(r.ts_ns for r in records)
    for r in records:
        decode(r.value())  # every payload is a valid message
    assert all(label.start_ns < reader.header.created_ns + 8e9 for label in read_labels(out))


def test_topology_matches_the_fabric(tmp_path: Path) -> None:
    trace = read_trace(run(tmp_path, "demo", duration=2))
    topo = trace.topology
    kinds = defaultdict(int)
    for d in topo.devices:
        kinds[d.kind] += 1
    assert dict(kinds) == {"host": 48, "nic": 48, "leaf": 4, "spine": 4}
    assert len(topo.links) == 48 + 4 * 4
    assert [g.id for g in topo.ecmp_groups] == [f"leaf0{i}/uplinks" for i in range(4)]
    leaf00 = trace.devices["leaf00"]
    assert (
        topo.ecmp_groups[0].members
        == leaf00.ports[12:]
        == ["Ethernet96", "Ethernet104", "Ethernet112", "Ethernet120"]
    )
    attach = {a.nic: (a.leaf, a.leaf_port) for a in topo.nics}
    assert attach["h013/mlx5_0"] == ("leaf01", "Ethernet8")
    assert trace.devices["h013/mlx5_0"].ports == ["1"]


def test_phases_carry_job_op_hosts_and_times(tmp_path: Path) -> None:
    trace = read_trace(run(tmp_path, "incast"))
    incast = [p for p in trace.phases if p.job == "moe-b"]
    assert [p.op for p in incast] == ["Reduce", "Reduce"]
    first = incast[0]
    assert first.hosts[first.root_rank] == "h010" and len(first.hosts) == 7
    assert (first.begin_ns - trace.start_ns, first.end_ns - trace.start_ns) == (20 * 10**9, 40 * 10**9)
    assert first.bytes == pytest.approx(6 * 0.4 * LINE_BYTES_PER_S * 20, rel=1e-6)
    assert first.comm.startswith("0x") and first.comm != incast[1].comm


# --- physics -----------------------------------------------------------------------------------


def test_incast_fills_the_victim_queue_marks_ecn_and_drains_after(tmp_path: Path) -> None:
    trace = read_trace(run(tmp_path, "incast"))
    labels = [lb for lb in trace.labels if lb.kind == "incast"]
    assert [(lb.root.device, lb.root.port, lb.root.priority) for lb in labels] == [
        ("leaf01", "Ethernet16", 3),
        ("leaf02", "Ethernet40", 3),
    ]
    for label in labels:
        lo, hi = window(trace, label)
        leaf = trace.devices[label.root.device]
        wm = leaf.col("queue_watermark_bytes", 3, label.root.port)[1:]
        ecn = leaf.delta("queue_ecn_marked_packets", 3, label.root.port)
        during = inside(leaf.t, lo, hi)
        quiet = outside(leaf.t, lo, hi, margin=1.0)
        assert (wm[during] > KMIN).all()
        assert (ecn[during] > 0).all()
        assert (wm[quiet] < 20 * 1024).all() and (ecn[quiet] == 0).all()
        receiver = trace.devices[f"{trace.topology.nics[_nic_at(trace, label)].nic}"]
        assert (receiver.delta("rx_ecn_marked_packets")[during] > 0).all()
        assert (receiver.delta("cnp_sent")[during] > 0).all()
    phase = next(p for p in trace.phases if p.job == "moe-b")
    senders = [h for h in phase.hosts if h != "h010"]
    assert all((trace.devices[f"{h}/mlx5_0"].delta("cnp_received")[25:35] > 0).all() for h in senders)
    # The strong incast (14 x 50% of line rate) passes XOFF: the leaf pauses ports that feed it.
    leaf02 = trace.devices["leaf02"]
    paused = [p for p in leaf02.ports if leaf02.delta("tx_pfc_frames", 3, p)[65:75].min() > 0]
    assert paused and all(leaf02.delta("tx_pfc_frames", 3, p)[25:35].max() == 0 for p in paused)


def _nic_at(trace: Trace, label: Label) -> int:
    return next(
        i
        for i, a in enumerate(trace.topology.nics)
        if (a.leaf, a.leaf_port) == (label.root.device, label.root.port)
    )


def test_pfc_storm_pauses_the_root_port_all_the_time_and_spreads(tmp_path: Path) -> None:
    trace = read_trace(run(tmp_path, "pfc_storm"))
    (label,) = trace.labels
    assert (label.kind, label.root.device, label.root.port, label.root.priority) == (
        "pfc_storm",
        "h003/mlx5_0",
        "1",
        3,
    )
    lo, hi = window(trace, label)
    poll = 0.2
    leaf = trace.devices["leaf00"]
    port = "Ethernet24"  # h003 is the fourth host on leaf00
    during = inside(leaf.t, lo, hi)
    interval_us = np.diff(leaf.t) * 1e6
    paused_share = leaf.delta("rx_pfc_duration_us", 3, port) / interval_us
    assert paused_share[during] == pytest.approx(1.0, abs=0.06)
    assert (leaf.delta("rx_pfc_frames", 3, port)[during] > 0).all()
    sent = leaf.delta("tx_bytes", None, port)
    assert (sent[during] < 0.001 * LINE_BYTES_PER_S * poll).all()
    assert sent[outside(leaf.t, lo, hi)].min() > 0.05 * LINE_BYTES_PER_S * poll
    assert (leaf.col("queue_occupancy_bytes", 3, port)[1:][during] > KMIN).all()
    nic = trace.devices["h003/mlx5_0"]
    assert nic.delta("tx_pfc_duration_us", 3)[inside(nic.t, lo, hi)] == pytest.approx(poll * 1e6, rel=0.06)
    # Hop by hop: the root's leaf pauses its uplinks first, then spines pause other leaves.
    first_pause = {
        name: _first_pause(dev, lo)
        for name, dev in trace.devices.items()
        if name.startswith(("leaf", "spine")) and _first_pause(dev, lo) is not None
    }
    assert {"leaf00", "spine00"} <= set(first_pause)
    assert first_pause["leaf00"] < min(t for n, t in first_pause.items() if n.startswith("spine"))
    assert any(n.startswith("leaf") and n != "leaf00" for n in first_pause)
    assert all(t < hi for t in first_pause.values())


def _first_pause(dev: Series, after: float) -> float | None:
    """When a switch first sent PFC on priority 3 after ``after`` (end of the first polled interval)."""
    sent = np.diff(dev.values[:, :, dev.columns[("tx_pfc_frames", 3)]].astype(np.float64), axis=0).max(axis=1)
    hits = np.flatnonzero((sent > 0) & (dev.t[1:] > after))
    return float(dev.t[1:][hits[0]]) if len(hits) else None


def _uplink_shares(trace: Trace, leaf: str, lo: float, hi: float) -> tuple[np.ndarray, float]:
    """Byte shares of a leaf's uplink group over [lo, hi] and the group's load (fraction of capacity)."""
    group = next(g for g in trace.topology.ecmp_groups if g.id == f"{leaf}/uplinks")
    dev = trace.devices[leaf]
    during = inside(dev.t, lo, hi)
    sent = np.array([dev.delta("tx_bytes", None, p)[during].sum() for p in group.members])
    seconds = np.diff(dev.t)[during].sum()
    return sent / sent.sum(), sent.sum() / (len(sent) * LINE_BYTES_PER_S * seconds)


def test_ecmp_collapse_concentrates_the_group_and_balanced_allreduce_does_not(tmp_path: Path) -> None:
    trace = read_trace(run(tmp_path, "ecmp_collapse"))
    (label,) = trace.labels
    assert (label.kind, label.root.device, label.root.group, label.jobs) == (
        "ecmp_collapse",
        "leaf01",
        "leaf01/uplinks",
        ["pp-d"],
    )
    shares, load = _uplink_shares(trace, "leaf01", *window(trace, label))
    assert shares.max() > 2.5 / len(shares) and load > 0.2
    before, _ = _uplink_shares(trace, "leaf01", 0, 29)
    assert np.abs(before * len(before) - 1).max() < 0.25

    benign = read_trace(run(tmp_path, "benign"))
    label = next(lb for lb in benign.labels if lb.note.startswith("balanced_allreduce"))
    assert label.kind == "benign"
    lo, hi = window(benign, label)
    for leaf in ("leaf00", "leaf01", "leaf02", "leaf03"):
        shares, load = _uplink_shares(benign, leaf, lo, hi)
        assert load > 0.3
        assert np.abs(shares * len(shares) - 1).max() < 0.25


def test_absorbed_bursts_stay_below_pfc(tmp_path: Path) -> None:
    trace = read_trace(run(tmp_path, "benign"))
    label = next(lb for lb in trace.labels if lb.note.startswith("absorbed_burst"))
    lo, hi = window(trace, label)
    leaf = trace.devices[label.root.device]
    during = inside(leaf.t, lo, hi)
    wm = leaf.col("queue_watermark_bytes", 3, label.root.port)[1:]
    assert wm[during].max() > KMIN and wm[during].max() < 2000 * 1024
    assert all(leaf.delta("tx_pfc_frames", 3, p).max() == 0 for p in leaf.ports)


def test_counters_never_decrease_except_on_wrap_or_reset(tmp_path: Path) -> None:
    resets = [{"device": "leaf01", "at": 30.05}, {"device": "h005/mlx5_0", "at": 12.3}]
    trace = read_trace(run(tmp_path, "demo", duration=60, collector={"resets": resets}))
    for name, dev in trace.devices.items():
        counter = np.array([k == "counter" for k in dev.kinds])
        wide = counter & (np.array(dev.widths) == 64)
        d = np.diff(dev.values.astype(np.int64), axis=0)  # random starts are below 2^40: no 64-bit wrap
        reset_at = [r["at"] for r in resets if r["device"] == name]
        steps_back = np.flatnonzero((d[:, :, wide] < 0).any(axis=(1, 2)))
        if reset_at:
            (step,) = steps_back  # every counter restarts in the one interval holding the reset
            assert dev.t[step] < reset_at[0] <= dev.t[step + 1]
            assert (dev.values[step + 1][:, wide] < 2**36).all()
        else:
            assert len(steps_back) == 0, name
        narrow = counter & (np.array(dev.widths) == 32)
        assert (dev.values[:, :, narrow] < 2**32).all()
        wrapped = (d[:, :, narrow] < 0) & ~np.isin(np.arange(len(d)), steps_back)[:, None, None]
        assert ((d[:, :, narrow] % 2**32)[wrapped] < 2**20).all(), name


def test_32_bit_counters_wrap(tmp_path: Path) -> None:
    collector = {"counter_start": "near_wrap", "reorder_probability": 0, "duplicate_probability": 0}
    trace = read_trace(run(tmp_path, "noisy", duration=30, collector=collector))
    wraps = 0
    for dev in trace.devices.values():
        narrow = np.array([k == "counter" and w == 32 for k, w in zip(dev.kinds, dev.widths, strict=True)])
        if narrow.any():
            before, after = dev.values[:-1, :, narrow], dev.values[1:, :, narrow]
            wrapped = after < before
            assert (((after - before) % np.uint64(2**32))[wrapped] < 2**20).all()  # a wrap, not garbage
            wraps += int(wrapped.sum())
    assert wraps > 0


def test_collector_artifacts_gaps_duplicates_reordering_skew(tmp_path: Path) -> None:
    out = run(tmp_path, "noisy", duration=20)
    per_device: dict[str, list[int]] = defaultdict(list)
    with TraceReader(out) as reader:
        for rec in reader:
            if rec.topic == topics.COUNTERS:
                snap = decode(rec.value(), Snapshot)
                per_device[snap.device].append(snap.ts_ns)
    polls = 201
    counts = [len(v) for v in per_device.values()]
    assert min(counts) < polls  # gaps
    duplicates = sum(len(v) - len(set(v)) for v in per_device.values())
    reordered = sum(int((np.diff(v) < 0).sum()) for v in per_device.values())
    assert duplicates > 0 and reordered > 0
    offsets = [(v[0] - reader.header.created_ns) / 1e9 for v in per_device.values()]
    assert max(offsets) - min(offsets) > 0.01  # per-device clock skew


def test_a_switch_refreshing_slower_than_it_is_polled_repeats_its_last_refresh(tmp_path: Path) -> None:
    collector = {"refresh": [{"devices": "leaf*", "interval": 1.0}], "jitter_ms": 0, "gap_probability": 0}
    trace = read_trace(run(tmp_path, "demo", duration=10, poll_interval=0.5, collector=collector))
    leaf, nic = trace.devices["leaf01"], next(d for n, d in trace.devices.items() if "/" in n)
    moved = [bool((b != a).any()) for a, b in zip(leaf.values, leaf.values[1:], strict=False)]
    assert moved.count(False) >= len(moved) // 2 - 1, "every other read of the leaf repeats the last one"
    assert True in moved, "and the reads in between show the refreshes"
    assert all((b != a).any() for a, b in zip(nic.values, nic.values[1:], strict=False))


def test_switches_can_omit_counters_they_do_not_export(tmp_path: Path) -> None:
    collector = {"omit": [{"devices": "spine*", "counters": ["queue_occupancy_bytes"]}]}
    trace = read_trace(run(tmp_path, "demo", duration=3, collector=collector))
    assert ("queue_occupancy_bytes", 3) not in trace.devices["spine00"].columns
    assert ("queue_watermark_bytes", 3) in trace.devices["spine00"].columns
    assert ("queue_occupancy_bytes", 3) in trace.devices["leaf01"].columns


# --- scenario errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("duration: 10\nfabrik: {}", "fabrik: unknown key"),
        ("duration: 10\nfabric: {leafs: 2}", "fabric.leafs: unknown key"),
        ("duration: ten", "duration: expected `float`, got `str`"),
        ("poll_interval: 1", "duration: required key is missing"),
        ("duration: 10\npoll_interval: 20", "poll_interval: must be between 0.1 and 10 seconds"),
        (
            "duration: 10\nfaults: [{kind: incast, receiver: h001, senders: 4, start: 1, duration: 2},"
            " {kind: pfc_storm, root: h999, start: 1, duration: 2}]",
            "faults[1].root: unknown host 'h999'",
        ),
        (
            "duration: 10\nfaults: [{kind: meteor, start: 1, duration: 2}]",
            "faults[0].kind: invalid value 'meteor'",
        ),
        (
            "duration: 10\nfaults: [{kind: pfc_storm, root: h001, start: 1, duration: 2, colour: red}]",
            "faults[0].colour: unknown key",
        ),
        (
            "duration: 10\njobs: [{name: a, hosts: 4, schedule: [{op: AllReduce, begin: 5, end: 2}]}]",
            "jobs[0].schedule[0].end: must be after begin",
        ),
        ("duration: 10\njobs: [{name: a, hosts: [h001, h1000]}]", "jobs[0].hosts[1]: unknown host 'h1000'"),
        (
            "duration: 10\nfaults: [{kind: ecmp_collapse, leaf: leaf01, load: 0.02, start: 1, duration: 2}]",
            "faults[0].load: puts 16% of line rate on the members it uses",
        ),
        (
            "duration: 10\njobs: [{name: a, hosts: 4, schedule: [{op: AllReduce, begin: 0, end: 9}]}]\n"
            "faults: [{kind: step_stretch, job: a, start: 1, duration: 2}]",
            "faults[0].job: has no bursty activity: no steps to change",
        ),
        (
            "duration: 10\nfaults: [{kind: job_stop, job: nobody, start: 1, duration: 2}]",
            "faults[0].job: unknown job 'nobody'",
        ),
        ("duration: 10\nstart_time: yesterday", "start_time: not an ISO 8601 time"),
        ("duration: [", "not valid YAML"),
        (
            "duration: 10\ncollector: {omit: [{devices: 'leaf*', counters: [queue_depth]}]}",
            "collector.omit[0].counters[0]: not a counter name: 'queue_depth'",
        ),
    ],
)
def test_bad_scenarios_name_the_key_path(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(text)
    assert message in str(err.value)


def test_a_fault_can_name_a_nic_by_its_id(tmp_path):
    """Faults on multi-NIC hosts name the NIC (`h013/mlx5_5`), not only the host."""
    text = (SCENARIOS / "pfc_storm.yaml").read_text().replace("root: h003", "root: h003/mlx5_0")
    trace = tmp_path / "nic.trace"
    simulate(load_scenario(text, {"duration": 25}), trace)
    (label,) = read_labels(trace)
    assert label.root.device == "h003/mlx5_0"


def test_a_scenario_file_error_names_the_file_and_the_key_likely_meant(tmp_path):
    """Found: a scenario error named the key but not the file, with no "did you mean"."""
    path = tmp_path / "site.yaml"
    path.write_text("duration: 10\nfabric:\n  link_gpbs: 400\n")
    with pytest.raises(
        ScenarioError, match=r"site\.yaml: fabric\.link_gpbs: unknown key \(did you mean `link_gbps`\?\)"
    ):
        load_scenario(path)
    path.write_text("duration: -1\n")
    with pytest.raises(ScenarioError, match=r"site\.yaml: "):
        load_scenario(path)
