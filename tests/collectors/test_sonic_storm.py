"""A PFC storm that reaches the workers through SONiC switches' Redis: every switch of a simulated
fabric gets a real redis-server whose COUNTERS_DB the test drives with the simulator's counter
values, poll by poll, in real time; `fabricwatch collect sonic` polls them all into Tansu, the
hosts' NIC snapshots are published as host collectors would, and two workers must find the storm
at the stalled NIC."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import msgspec
import pytest
from helpers.streaming import Collector, anomalies_in
from helpers.waiting import wait_for

from fabricwatch.ingest.simulator.run import simulate
from fabricwatch.ingest.simulator.scenario import load_scenario
from fabricwatch.ingest.simulator.sonic_db import SnapshotSwitch
from fabricwatch.ingest.sonic.switch import COUNTERS_DB
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.local.redis_server import redis_server
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Label, Phase, PhaseMessage, Snapshot, Topology, decode, encode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.kafka_io import Publisher

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed"),
]
POLL_S = 0.5
SCENARIO = """
name: storm_through_redis
description: a stalled NIC's PFC storm on a small fabric, its switches read from Redis
seed: 3
duration: 16
poll_interval: 0.5
fabric: {leaves: 2, spines: 2, hosts_per_leaf: 4}
jobs:
  - name: llm-a
    hosts: 8
    placement: spread
    schedule: [{op: AllReduce, begin: 0, end: 16, load: 0.3}]
faults:
  - {kind: pfc_storm, root: h002, start: 5, duration: 8, propagation_delay: 0.4}
"""


def shifted(msg: msgspec.Struct, by_ns: int) -> msgspec.Struct:
    """The message moved in time by ``by_ns``: the simulated clock onto the wall clock."""
    fields = {f: getattr(msg, f) + by_ns for f in ("ts_ns", "begin_ns", "end_ns") if getattr(msg, f, None)}
    return msgspec.structs.replace(msg, **fields)


def test_a_storm_read_from_the_switches_redis_is_found_at_its_root(broker, workers, tmp_path: Path):
    scenario = tmp_path / "storm.yaml"
    scenario.write_text(SCENARIO)
    trace = tmp_path / "storm.trace"
    simulate(load_scenario(scenario), trace)
    polls: dict[int, list[Snapshot]] = {}
    """By poll number: the simulated collectors' jitter gives each device's snapshot its own time."""
    others, label = [], None
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic == topics.COUNTERS:
                snap = decode(rec.value(), Snapshot)
                polls.setdefault(round(snap.ts_ns / (POLL_S * 1e9)), []).append(snap)
            elif rec.topic == topics.LABELS:
                label = decode(rec.value(), Label)
            else:
                others.append((rec.topic, rec.key, decode(rec.value(), Topology | PhaseMessage)))
    assert label is not None and label.kind == "pfc_storm"
    numbers = sorted(polls)
    switch_names = sorted({s.device for s in polls[numbers[0]] if s.device_kind == "switch"})

    with ExitStack() as stack:
        urls = {name: stack.enter_context(redis_server()) for name in switch_names}
        first = {s.device: s for s in polls[numbers[0]]}
        switches = {name: SnapshotSwitch(url, first[name]) for name, url in urls.items()}
        config = tmp_path / "site.yaml"
        lines = [f"    - {{name: {n}, redis: '{u}/{COUNTERS_DB}'}}" for n, u in urls.items()]
        config.write_text("sonic:\n  switches:\n" + "\n".join(lines) + "\n")
        for w in workers:
            w.wait_ready()
        anomalies = Collector(broker, topics.ANOMALIES)
        argv = ["collect", "sonic", "--config", str(config), "--broker", broker.bootstrap]
        argv += ["--interval", str(POLL_S), "--web-port", "0"]
        daemon = subprocess.Popen(
            [*fabricwatch_command(), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
        publisher = Publisher(broker)
        t0 = (int(time.time() / POLL_S) + 5) * POLL_S  # a poll boundary a couple of seconds away
        offset = int(t0 * 1e9) - numbers[0] * int(POLL_S * 1e9)
        for topic, key, msg in others:
            publisher.send(topic, key, encode(shifted(msg, offset)), msg_ts(msg) + offset)
        try:
            for number in numbers:
                # each poll's switch counters are in Redis a quarter poll before the collector reads
                time.sleep(max(0.0, t0 + (number - numbers[0]) * POLL_S - POLL_S / 4 - time.time()))
                for snap in polls[number]:
                    if snap.device_kind == "switch":
                        switches[snap.device].write(snap)
                    else:
                        moved = shifted(snap, offset)
                        publisher.send(topics.COUNTERS, snap.device, encode(moved), moved.ts_ns)
            publisher.flush()
            assert wait_for(lambda: storms_in(anomalies), 30)
        finally:
            publisher.close()
            daemon.send_signal(signal.SIGTERM)
            _, err = daemon.communicate(timeout=30)
            for switch in switches.values():
                switch.close()
            anomalies.stop()  # before the broker goes: a reader left running dies asking it
    storms = storms_in(anomalies)
    assert {a.root.device for a in storms} == {label.root.device}, [a.summary for a in storms]
    paused = {d for a in storms for d in a.devices}
    assert paused & set(switch_names), paused  # the pause tree was read from the switches' Redis
    assert daemon.returncode == 0, err
    assert "0 failed, 0 dropped" in err


def storms_in(anomalies: Collector) -> list:
    return [a for a in anomalies_in(anomalies.records) if a.kind == "pfc_storm"]


def msg_ts(msg: Topology | PhaseMessage) -> int:
    return msg.begin_ns if isinstance(msg, Phase) else msg.ts_ns
