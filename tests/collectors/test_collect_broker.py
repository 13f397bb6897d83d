"""`fabricwatch collect --broker` as the daemon it is on a node: a process polling a real sysfs tree
(the procfs project's mlx5_0 fixture, with an Intel E810 and an Omni-Path HFI laid out beside it)
whose counters move while it runs, publishing to a real broker (Tansu), with a worker turning the
snapshots into rates."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers.nic_trees import lay_out
from helpers.prometheus import prometheus
from helpers.streaming import Collector
from helpers.waiting import wait_for

from fabricwatch.local.broker import free_port
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import decode_rates

TX_WORDS_PER_S = 25_000_000  # port_xmit_data counts 4-octet words: 100 MB/s, 800 Mb/s
RX_WORDS_PER_S = 5_000_000


class MovingCounters:
    """Advances counter files at fixed rates per second, as a NIC would."""

    def __init__(self, files: dict[Path, int]) -> None:
        self._files = files
        self._base = {path: int(path.read_text()) for path in self._files}
        self._stop = threading.Event()
        self._t0 = time.time()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fds = {path: os.open(path, os.O_WRONLY) for path in self._files}
        try:
            while not self._stop.wait(0.005):
                elapsed = time.time() - self._t0
                for path, rate in self._files.items():
                    # In place and of one width, as sysfs regenerates a file: the collector keeps
                    # it open and reads it from offset 0 each poll.
                    os.pwrite(fds[path], f"{self._base[path] + int(rate * elapsed):<24}\n".encode(), 0)
        finally:
            for fd in fds.values():
                os.close(fd)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def start_daemon(broker, sysfs: Path, web_port: int = 0) -> subprocess.Popen:
    argv = ["collect", "--broker", broker.bootstrap, "--sysfs-root", str(sysfs), "--host", "gpu7"]
    argv += ["--interval", "0.5", "--no-ethtool", "--web-port", str(web_port)]
    return subprocess.Popen(
        [*fabricwatch_command(), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )


def fixture_port_moving(sysfs: Path) -> dict[Path, int]:
    counters = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    return {counters / "port_xmit_data": TX_WORDS_PER_S, counters / "port_rcv_data": RX_WORDS_PER_S}


CNPS_PER_S = 20_000
"""The E810's (irdma) cnpHandled: CNPs its RoCE congestion control handled."""


def other_families_moving(sysfs: Path) -> dict[Path, int]:
    """An Intel E810 (irdma) and an Omni-Path HFI (hfi1) beside the mlx5 NIC, counters moving."""
    files = {}
    for vendor in ("irdma", "ib"):
        port = sysfs / "class" / "infiniband" / lay_out(sysfs, vendor, 1) / "ports" / "1"
        files[port / "counters" / "port_xmit_data"] = TX_WORDS_PER_S
    files[port.parents[2] / "rocep24s0f0" / "ports" / "1" / "hw_counters" / "cnpHandled"] = CNPS_PER_S
    return files


def test_the_daemon_publishes_what_a_worker_turns_into_the_counters_rates(broker, workers, sysfs):
    for w in workers:
        w.wait_ready()
    rates = Collector(broker, topics.RATES)
    moving = MovingCounters(fixture_port_moving(sysfs) | other_families_moving(sysfs))

    def devices() -> dict[str, int]:
        seen: dict[str, int] = {}
        for msg in rates.rates():
            seen[msg.device] = seen.get(msg.device, 0) + 1
        return seen

    daemon = start_daemon(broker, sysfs)
    try:
        assert wait_for(lambda: len(devices()) == 3 and min(devices().values()) >= 4, 60), devices()
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, err = daemon.communicate(timeout=30)
        moving.stop()
    assert daemon.returncode == 0, err  # SIGTERM: what was read is sent, and a clean exit
    published = [line for line in err.splitlines() if ": published " in line]
    assert published and "(0 failed, 0 dropped)" in published[0], err
    assert "collected " in out

    wanted = ("tx_bps", "rx_bps", "cnp_received_pps")  # by name: a batch sends the columns fed
    tx, rx, cnps = range(len(wanted))
    # Each device's rates over the run, weighted by interval: the counters move in a thread of this
    # process, which a loaded machine can hold back for a tenth of a second at one read and not the
    # next, so one interval can be 15% off while the run's total is exact.
    sent: dict[str, list[tuple[float, np.ndarray]]] = {}
    for msg in (m for record in rates.stop() for m in decode_rates(record.value)):
        assert 0.4 <= msg.dt_s <= 0.6  # 0.5 s polls, as a loaded 2-core machine schedules them
        sent.setdefault(msg.device, []).append((msg.dt_s, np.array([msg.column(c)[0] for c in wanted])))
    for device, rows in sent.items():
        seconds = sum(dt for dt, _ in rows)
        mean = sum(dt * row for dt, row in rows) / seconds
        assert mean[tx] == pytest.approx(TX_WORDS_PER_S * 4 * 8, rel=0.05), device
        assert all(row[tx] == pytest.approx(TX_WORDS_PER_S * 4 * 8, rel=0.35) for _, row in rows), device
        if device == "gpu7/mlx5_0":
            assert mean[rx] == pytest.approx(RX_WORDS_PER_S * 4 * 8, rel=0.05)
        if device == "gpu7/rocep24s0f0":  # Intel E810: its congestion counters read by irdma's map
            assert mean[cnps] == pytest.approx(CNPS_PER_S, rel=0.05)


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus is not installed")
def test_prometheus_scrapes_the_collector_and_a_worker(broker, workers, sysfs, tmp_path):
    """A real Prometheus server scrapes the collector's and the workers' /metrics on loopback; PromQL
    over its HTTP API finds the collector's poll durations and published messages and the
    snapshots the workers processed."""
    for w in workers:
        w.wait_ready()
    collector_port = free_port()
    jobs = {"collector": [collector_port], "worker": [w.port for w in workers]}
    with prometheus(tmp_path, jobs) as server:
        daemon = start_daemon(broker, sysfs, collector_port)
        try:
            polls = 'fabricwatch_collect_poll_duration_seconds_count{job="collector"}'
            published = 'fabricwatch_collect_messages_total{job="collector",outcome="acked"}'
            processed = 'fabricwatch_processed_total{job="worker",what="snapshots"}'
            assert wait_for(lambda: all(server.series(f"{q} > 0") for q in (polls, published)), 60)
            assert wait_for(lambda: server.series(f"sum({processed}) > 0"), 60)  # the collector's snapshots
            health = urllib.request.urlopen(f"http://127.0.0.1:{collector_port}/healthz", timeout=2)
            assert json.load(health)["healthy"] is True
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.communicate(timeout=30)
