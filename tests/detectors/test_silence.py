"""A device that stops reporting: its own incident, within its bound, and never a recovery of what
it was part of (issue 32, Found 12; issue 33: missing data is unknown, never healthy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import small_fabric

from fabricwatch.detectors.silence import SilenceConfig, SilenceWatch
from fabricwatch.schemas.messages import Anomaly

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str, duration: int = 150) -> list[Anomaly]:
    return small_fabric.replayed(tmp_path, "silence", faults, 7, duration)


def at(a: Anomaly, start_s: float) -> float:
    """Seconds after the scenario's second ``start_s``."""
    return round((a.ts_ns - T0) / NS - start_s, 1)


def test_a_nic_that_stops_reporting_fires_within_its_bound_and_resolves_when_back(tmp_path):
    events = replayed(tmp_path, "  - {kind: device_silent, device: h003/mlx5_0, start: 40.3, duration: 50}")
    silent = [a for a in events if a.kind == "device_silent"]
    assert [(a.status, a.root.device) for a in silent] == [
        ("firing", "h003/mlx5_0"),
        ("resolved", "h003/mlx5_0"),
    ]
    firing, resolved = silent
    # Dark for 10 of its 1 s polls and at least 30 s since its last poll (40.0 s, read up to 20 ms
    # early), found at the next sweep of the fabric's clock.
    dark_s = (firing.ts_ns - int(firing.evidence["last_seen_ns"])) / NS
    assert dark_s >= 30 and at(firing, 40.3) <= 32, (dark_s, at(firing, 40.3))
    assert firing.severity == "warning" and "h003" in firing.hosts
    assert "h003/mlx5_0 sent nothing for over" in firing.summary and "unknown" in firing.summary
    assert firing.jobs == ["dp"]
    # Back: seen at its next poll (1 s), cleared at the next sweep (1 s), resolved after its quiet
    # wait (resolve_after_s, 3 s) at a tick of the next poll (1 s).
    assert 0 <= at(resolved, 90.3) <= 6, at(resolved, 90.3)
    assert [a for a in events if a.kind != "device_silent"] == []


def test_a_silent_switch_is_critical_and_names_the_hosts_under_it(tmp_path):
    events = replayed(tmp_path, "  - {kind: device_silent, device: leaf01, start: 30, duration: 40}", 100)
    firing = [a for a in events if a.status == "firing"]
    assert [(a.kind, a.root.device, a.severity) for a in firing] == [("device_silent", "leaf01", "critical")]
    assert set(firing[0].hosts) >= {f"h{i:03d}" for i in range(8)}  # and its jobs' hosts


def test_a_storm_whose_root_goes_dark_is_not_called_over_until_it_reports_again(tmp_path):
    """Before: the root's symptoms expired with its silence and the storm resolved at once."""
    faults = (
        "  - {kind: pfc_storm, root: h005, start: 30.4, duration: 25}\n"
        "  - {kind: device_silent, device: h005/mlx5_0, start: 40.2, duration: 60}"
    )
    events = replayed(tmp_path, faults)
    storm = [a for a in events if a.kind == "pfc_storm"]
    assert storm[0].status == "firing" and storm[-1].status == "resolved"
    assert storm[0].root.device == "h005/mlx5_0"
    assert at(storm[-1], 100.2) >= 0  # the storm stayed open while its root was dark
    silent = [a for a in events if a.kind == "device_silent"]
    assert [a.status for a in silent] == ["firing", "resolved"]


def polls(watch: SilenceWatch, device: str, start_s: float, end_s: float, every_s: float = 1.0) -> None:
    t = start_s
    while t < end_s:
        watch.seen(device, "nic", T0 + int(t * NS))
        t += every_s


def sweep(watch: SilenceWatch, start_s: float, end_s: float) -> list[tuple[str, bool, float]]:
    """Each device's changes over the sweeps (a dark device's symptom is repeated at every one)."""
    found, state = [], {}
    for t in range(int(start_s), int(end_s)):
        for s in watch.sweep(T0 + t * NS):
            if state.get(s.device) != s.active:
                found.append((s.device, s.active, s.evidence["silent_s"]))
            state[s.device] = s.active
    return found


def test_missed_polls_a_stray_snapshot_and_a_slow_poller_are_not_silence():
    watch = SilenceWatch(SilenceConfig())
    polls(watch, "a", 0, 30)
    polls(watch, "a", 40, 60)  # ten polls missed: under min_dark_s
    watch.seen("stray", "nic", T0 + 5 * NS)  # one snapshot of a renamed device, never again
    polls(watch, "slow", 0, 60, every_s=10.0)  # every 10 s: dark only after 100 s
    assert sweep(watch, 1, 60) == []


def test_a_device_dark_past_forget_after_is_cleared_saying_so_and_watched_again_when_back():
    watch = SilenceWatch(SilenceConfig(dark_after_polls=5, min_dark_s=10, forget_after_s=100))
    polls(watch, "a", 0, 10)
    assert sweep(watch, 10, 30) == [("a", True, 11.0)]
    assert sweep(watch, 30, 110) == [("a", True, 21.0)]  # still dark: repeated, never cleared
    cleared = watch.sweep(T0 + 111 * NS)
    assert [(s.active, s.evidence["cleared"]) for s in cleared] == [(False, "forgotten")]
    assert sweep(watch, 112, 200) == []
    polls(watch, "a", 200, 210)
    assert sweep(watch, 210, 230) == [("a", True, 11.0)]


def test_a_device_handed_to_another_worker_is_cleared_and_no_longer_timed_here():
    watch = SilenceWatch(SilenceConfig(dark_after_polls=5, min_dark_s=10))
    polls(watch, "a", 0, 10)
    polls(watch, "b", 0, 10)
    assert {d for d, active, _ in sweep(watch, 10, 30) if active} == {"a", "b"}
    handed = watch.forget(["a"], T0 + 30 * NS)
    assert [(s.device, s.active, s.evidence["cleared"]) for s in handed] == [("a", False, "handed over")]
    polls(watch, "b", 30, 31)
    assert sweep(watch, 31, 300) == [("b", False, 1.0), ("b", True, 11.0)]


@pytest.mark.parametrize("seed", range(4))
def test_a_batch_is_seen_as_its_polls_one_at_a_time(seed):
    """``seen_many`` (a worker's batch, in numpy passes per wave) against ``seen`` poll by poll:
    the same polls end a dark spell, and the watches sweep the same symptoms after. Random runs
    with devices polled several times in a batch, late and repeated stamps, dark spells, and
    devices forgotten (handed over) and back."""
    rng = np.random.default_rng(seed)
    cfg = SilenceConfig(dark_after_polls=3, min_dark_s=5, established_polls=2, forget_after_s=60)
    one, many = SilenceWatch(cfg), SilenceWatch(cfg)
    clock = {f"d{i}": 0.0 for i in range(12)}
    for step in range(120):
        batch = []
        for _ in range(int(rng.integers(1, 25))):
            device = f"d{rng.integers(12)}"
            clock[device] += float(rng.choice([1.0, 1.0, 0.5, 0.0, -1.0, 9.0, 40.0]))
            source = f"fabric.counters/{rng.integers(3)}"
            batch.append((device, "nic", T0 + int(max(clock[device], 0.0) * NS), source))
        want = [k for k, (d, kind, ts, src) in enumerate(batch) if one.seen(d, kind, ts, src)]
        assert many.seen_many(*map(list, zip(*batch, strict=True))) == want
        now = T0 + int(max(clock.values()) * NS)
        assert one.sweep(now) == many.sweep(now)
        if step % 30 == 29:
            gone = [f"d{rng.integers(12)}"]
            assert one.forget(gone, now) == many.forget(gone, now)
