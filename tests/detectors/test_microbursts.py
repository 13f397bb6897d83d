"""Issue 36, item 2: a queue that fills into the marking band between two reads, poll after poll,
while its port averages far below line rate, is a microburst finding; one burst, rare bursts and a
queue that stands at line rate are not, and polls nothing was read in say nothing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import small_fabric
from helpers.recorders import as_stage1_runs

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incast import IncastConfig
from fabricwatch.detectors.microbursts import Microbursts
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.detectors.windows import WindowError
from fabricwatch.schemas.bursts import MicroburstConfig
from fabricwatch.schemas.messages import CounterSpec, Symptom
from fabricwatch.schemas.topology import Device, Topology

NS = 1_000_000_000
T0 = 1_767_225_600 * NS
LINE = 5e10  # 400 Gb/s in bytes a second
KMIN = 150_000.0
PORTS = ["Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24", "Ethernet32", "Ethernet40"]
"""A leaf's host ports: bursting every poll; bursting once; in the band at 85 % and still deep
when read (it stands: an incast's, not a burst); on a shallow profile, marking with its watermark
under the configured Kmin; bursting in one poll of ten; its watermark a hair past Kmin every poll,
marking nothing (no cost)."""
SPECS = (
    CounterSpec("tx_bytes", "counter", 64),
    CounterSpec("queue_watermark_bytes", "watermark", 64, index=3),
    CounterSpec("queue_ecn_marked_packets", "counter", 64, index=3),
    CounterSpec("queue_occupancy_bytes", "gauge", 64, index=3),
)


def run(seconds: int, rows_at, start_s: int = 0, detector: Microbursts | None = None):
    """Polls every second; ``rows_at(t)`` gives each port's (tx utilisation, watermark, marks/s,
    occupancy)."""
    detector = detector or Microbursts(MicroburstConfig(), IncastConfig(ecn_kmin_bytes=KMIN))
    fab, said = FabricMap(Topology(ts_ns=T0, devices=[Device("leaf00", "leaf")], links=[])), []
    for t in range(start_s, start_s + seconds):
        values = np.array(rows_at(t), dtype=float) * [LINE, 1, 1, 1]
        frame = RateFrame("leaf00", "switch", T0 + t * NS, 1.0, PORTS, Layout.of(SPECS), values)
        said += as_stage1_runs(detector, Poll(frame, np.full(len(PORTS), LINE), fab))
    return detector, said


def bursty(t: int, bursting: bool = True) -> list[list[float]]:
    quiet = [0.3, 8_000, 0, 0]
    return [
        [0.3, 420_000, 900, 4_000] if bursting else quiet,
        [0.3, 600_000, 2_000, 0] if t == 30 else quiet,
        [0.85, 900_000, 40_000, 700_000],
        [0.3, 90_000, 300, 2_000] if bursting else quiet,
        [0.3, 500_000, 1_000, 0] if t % 10 == 0 else quiet,
        [0.3, 170_000, 0, 300],
    ]


def latest(said: list[Symptom]) -> dict[str, Symptom]:
    return {s.port: s for s in said}


def test_a_queue_bursting_poll_after_poll_is_found_from_its_first_burst_and_look_alikes_are_not():
    _, said = run(180, bursty)
    found = latest(said)
    assert set(found) == {"Ethernet0", "Ethernet24"}
    often, shallow = found["Ethernet0"], found["Ethernet24"]
    assert often.active and often.priority == 3 and often.start_ns == T0 - NS  # the first poll's interval
    assert often.evidence["bursts"] == often.evidence["polls"] == 60
    assert often.evidence["peak_watermark_bytes"] == 420_000 and often.evidence["marked_packets"] == 60 * 900
    assert shallow.active and shallow.evidence["peak_watermark_bytes"] == 90_000, "found by its marks"
    first = min(s.ts_ns for s in said)
    assert (first - T0) / NS <= 60 + 2 * 10 + 1, "within the window, two buckets and a poll"


def test_bursts_that_stop_clear_once_the_window_holds_few_enough():
    detector, said = run(180, bursty)
    assert latest(said)["Ethernet0"].active
    _, after = run(180, lambda t: bursty(t, bursting=False), start_s=180, detector=detector)
    ended = latest(after)["Ethernet0"]
    assert ended.active is False
    assert (ended.ts_ns - T0) / NS - 180 <= 60 * (1 - MicroburstConfig().min_share / 2) + 10 + 1


def test_polls_that_read_nothing_are_unknown_not_bursts_and_not_calm():
    """A switch whose queue counters read nothing for most of every minute (a collector that
    restarts): the window is under half read and judges nothing either way."""

    def gappy(t: int) -> list[list[float]]:
        rows = bursty(t)
        if t % 60 >= 20:
            rows = [[r[0], np.nan, np.nan, np.nan] for r in rows]
        return rows

    _, said = run(300, gappy)
    assert said == []


@pytest.mark.parametrize("poll_s", [1.0, 0.5])
def test_sub_poll_bursts_at_a_third_of_line_rate_are_microbursts_not_incasts(tmp_path, poll_s):
    """Found (issue 36): bursts of 10 ms at line rate, ten a second, into a host whose leaf port
    averages about a third of line rate, were read as incasts. Now they raise no incast, and the
    receiver's queue is one microburst finding naming the job and its All-to-All."""
    events = small_fabric.replayed(
        tmp_path,
        "microbursts",
        "  - {kind: absorbed_burst, job: moe, receiver: h004, senders: 5, load: 0.3, start: 20.3,"
        " duration: 150, burst: {duration: 0.01, period: 0.1}}",
        seed=36,
        duration=200,
        poll_s=poll_s,
    )
    assert not [a for a in events if a.kind == "incast"]
    firing = [a for a in events if a.status == "firing"]
    assert {(a.kind, a.root.device, a.root.port, a.root.priority) for a in firing} == {
        ("microbursts", "leaf00", "Ethernet32", 3)
    }
    (burst,) = firing
    assert burst.severity == "info" and burst.jobs == ["moe"]
    assert [c.split()[0] for c in burst.collectives] == ["AllToAll"]
    assert "(host h004)" in burst.summary and "packets ECN-marked" in burst.summary
    # Every poll since the bursts began (20.3 s) burst, in the window read so far.
    assert burst.evidence["bursts"] >= burst.evidence["polls"] - 21 / poll_s


def test_without_a_depth_gauge_a_queue_that_marks_all_poll_long_stood_and_did_not_burst():
    """Found (issue 36) on a simulated ECMP collapse: a spine queue standing at 800 KB at a third of
    line rate, on switches that read no queue depth, was a burst every poll. WRED marks a standing
    queue's packets at the share its depth sets all poll long; a burst marks only what it queued."""
    specs = (
        CounterSpec("tx_bytes", "counter", 64),
        CounterSpec("queue_watermark_bytes", "watermark", 64, index=3),
        CounterSpec("queue_ecn_marked_packets", "counter", 64, index=3),
        CounterSpec("queue_tx_packets", "counter", 64, index=3),
    )
    sent = 0.33 * LINE / 4096  # packets a second
    at_depth = 0.2 * (800_000 - KMIN) / (1_500_000 - KMIN)  # WRED's share at 800 KB
    detector = Microbursts(MicroburstConfig(), IncastConfig(ecn_kmin_bytes=KMIN))
    fab, said = FabricMap(Topology(ts_ns=T0, devices=[Device("spine00", "spine")], links=[])), []
    for t in range(180):
        values = np.array(
            [
                [0.33 * LINE, 800_000, 0.95 * at_depth * sent, sent],  # stood all poll
                [0.33 * LINE, 800_000, 0.05 * at_depth * sent, sent],  # a twentieth of its packets burst
            ]
        )
        frame = RateFrame("spine00", "switch", T0 + t * NS, 1.0, PORTS[:2], Layout.of(specs), values)
        said += as_stage1_runs(detector, Poll(frame, np.full(2, LINE), fab))
    assert {s.port for s in said} == {"Ethernet8"}


def test_a_window_moves_to_another_detector_and_one_kept_otherwise_is_refused():
    """What a worker restart relies on (``streams/window_keeper.py``): a device's window packed by
    one detector and taken by another judges on as the first would; a window kept under another
    bucket length is refused, not misread."""
    first, _ = run(90, bursty)
    again = Microbursts(MicroburstConfig(), IncastConfig(ecn_kmin_bytes=KMIN))
    again.restore_window("leaf00", first.window_state("leaf00"))
    _, carried = run(60, bursty, start_s=90, detector=again)
    _, stayed = run(60, bursty, start_s=90, detector=first)
    assert carried == stayed and carried
    other = Microbursts(MicroburstConfig(bucket_s=5.0), IncastConfig(ecn_kmin_bytes=KMIN))
    with pytest.raises(WindowError, match="kept under"):
        other.restore_window("leaf00", first.window_state("leaf00"))
    with pytest.raises(WindowError, match="not a _Window"):
        other.restore_window("leaf00", b"not a window")
