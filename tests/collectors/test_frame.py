"""Every collector driven as a function on the shared frame, as the command line drives it: its
settings, a ``Frame`` with a trace or a broker, and the frame's ``stop``. The end-to-end tests of
the commands (``test_collect_broker.py``, ``test_sonic_broker.py``, ...) start them as processes."""

from __future__ import annotations

import shutil
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.gnmi_target import Interface, Server, Target
from helpers.paths import FIXTURES
from helpers.streaming import Collector
from helpers.waiting import wait_for

from fabricwatch.collectors import gnmi, nccl_logs, nic, sonic
from fabricwatch.collectors.frame import Destination, Frame, Web
from fabricwatch.ingest.gnmi.subscribe import GnmiSettings, GnmiTarget
from fabricwatch.ingest.nic.poll import CollectSettings
from fabricwatch.ingest.phases.nccl_phases import JobReaders
from fabricwatch.ingest.simulator.sonic_db import SwitchDb
from fabricwatch.ingest.sonic.poll import SonicSettings, SwitchTarget
from fabricwatch.ingest.sonic.switch import COUNTERS_DB
from fabricwatch.local.broker import free_port
from fabricwatch.local.redis_server import redis_server
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Phase, PhaseMessage, Snapshot, decode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.metrics_server import WEB_PORTS


def traced(path: Path, kind: type = Snapshot) -> list:
    with TraceReader(path) as reader:
        return [decode(r.value(), kind) for r in reader]


def test_a_frame_needs_somewhere_to_put_what_is_collected():
    with pytest.raises(ValueError, match="nowhere to put what is collected: give --broker"):
        Destination()


def test_the_nic_collector_writes_its_polls_to_a_trace_and_serves_no_port_without_a_broker(sysfs, tmp_path):
    cfg = CollectSettings(interval_s=0.1, ethtool="none", sysfs_root=str(sysfs), host="gpu7")
    targets = nic.check(cfg)
    out = tmp_path / "host.trace"
    with Frame("collect", Destination(out), nic.TOPICS, meta={"poll_interval_s": 0.1}) as frame:
        stats = nic.run(cfg, frame, targets, count=3)
    assert frame.port == 0  # a one-off writing a trace is not a daemon: no /metrics unless asked
    assert stats.polls == 3 and stats.snapshots == 3
    assert [s.device for s in traced(out)] == ["gpu7/mlx5_0"] * 3
    assert "collected 3 snapshots of mlx5_0 in 3 polls" in nic.summary(stats, targets)


def test_the_frame_s_stop_ends_a_collector_between_polls(sysfs, tmp_path):
    cfg = CollectSettings(interval_s=0.5, ethtool="none", sysfs_root=str(sysfs))
    frame = Frame("collect", Destination(tmp_path / "t.trace"), nic.TOPICS)
    with frame:
        runner = threading.Thread(target=nic.run, args=(cfg, frame, nic.check(cfg)))
        runner.start()
        assert wait_for(lambda: frame.handed > 0, 10)
        began = time.monotonic()
        frame.stop.set()
        runner.join(timeout=5)
    assert not runner.is_alive() and time.monotonic() - began < 3.0  # not the 0.5 s polls' next turn


def test_the_nic_collector_publishes_and_serves_its_metrics_on_the_daemon_s_port(sysfs, broker):
    cfg = CollectSettings(interval_s=0.2, ethtool="none", sysfs_root=str(sysfs), lldp_interval_s=0)
    seen = Collector(broker, topics.COUNTERS)
    web = Web(port=free_port())
    with Frame("collect", Destination(broker=broker), nic.TOPICS, web=web) as frame:
        runner = threading.Thread(target=nic.run, args=(cfg, frame, nic.check(cfg), 5))
        runner.start()
        assert wait_for(lambda: frame.port == web.port, 10)
        runner.join(timeout=10)
        with urllib.request.urlopen(f"http://127.0.0.1:{frame.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    assert "fabricwatch_collect_polls_total 5.0" in text
    assert wait_for(lambda: len(seen.records) == 5, 20), len(seen.records)
    assert {decode(r.value, Snapshot).device.split("/")[1] for r in seen.stop()} == {"mlx5_0"}
    assert frame.published()["acked"] == 5 and WEB_PORTS["collect"] != web.port


@pytest.mark.processes  # a redis-server
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_the_sonic_collector_reads_a_switch_s_redis_into_a_trace(tmp_path):
    out = tmp_path / "sonic.trace"
    with redis_server() as url:
        db = SwitchDb(url, ports=4)
        try:
            db.schedule({"PORT": 50, "QUEUE": 50}, pfcwd_ms=50)
            cfg = SonicSettings(interval_s=0.1, switches=[SwitchTarget("leaf-3", f"{url}/{COUNTERS_DB}")])
            with Frame("collect sonic", Destination(out), sonic.TOPICS) as frame:
                collector = sonic.run(cfg, frame, count=3)
        finally:
            db.close()
    snaps = traced(out)
    assert [s.device for s in snaps] == ["leaf-3"] * 3 and all(s.device_kind == "switch" for s in snaps)
    assert "collected 3 snapshots of 1 switches in 3 polls" in collector.summary()


def test_the_gnmi_collector_subscribes_a_target_into_a_trace(tmp_path):
    out = tmp_path / "gnmi.trace"
    with Server(Target([Interface("Ethernet0", 2_000_000, 1_000)])) as server:
        cfg = GnmiSettings(interval_s=0.2, targets=[GnmiTarget("spine1", server.address)])
        with Frame("collect gnmi", Destination(out), gnmi.TOPICS) as frame:
            done = gnmi.run(cfg, frame, count=4)
    snaps = traced(out)
    assert len(snaps) == 4 and {s.device for s in snaps} == {"spine1"}
    assert done.summary(1).startswith("collected 4 snapshots of 1 targets")


def test_the_nccl_log_collector_follows_a_log_as_it_is_written(tmp_path):
    logs = tmp_path / "nccl" / "tp-job"
    logs.mkdir(parents=True)
    lines = (FIXTURES / "nccl_coll_tp_allgather_reducescatter_2rank.log").read_text().splitlines()
    out = tmp_path / "phases.trace"
    readers = JobReaders(None, 0.05, "nccl-log:test", lambda _: None, stamp_untimed=True)
    cfg = nccl_logs.FollowSettings([str(tmp_path / "nccl" / "*" / "*.log")], interval_s=0.05, from_start=True)
    with Frame("phases collect", Destination(out), nccl_logs.TOPICS, what="phases") as frame:
        runner = threading.Thread(target=nccl_logs.follow, args=(cfg, readers, frame))
        runner.start()
        with open(logs / "hopper01.log", "a", buffering=1) as log:
            log.writelines(line + "\n" for line in lines)
        assert wait_for(lambda: readers.stats.calls == len(lines), 10), readers.stats
        frame.stop.set()
        runner.join(timeout=5)
    phases = [m for m in traced(out, PhaseMessage) if isinstance(m, Phase)]
    ops = {line.split(" NCCL INFO ")[1].split(":")[0] for line in lines}
    assert {(p.job, p.op) for p in phases} == {("tp-job", op) for op in ops} and len(ops) >= 2
    assert f"{len(lines)} collective calls" in nccl_logs.summary(readers, out)
