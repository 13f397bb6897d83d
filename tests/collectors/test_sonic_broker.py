"""`fabricwatch collect sonic --broker` as the daemon it is: a process polling a real redis-server
whose COUNTERS_DB moves while it runs (as syncd's flex counters move it), publishing to a real
broker (Tansu), with workers turning the snapshots into rates equal to the counters' deltas."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time

import pytest
from helpers.streaming import Collector
from helpers.waiting import wait_for

from fabricwatch.ingest.simulator.sonic_db import SwitchDb
from fabricwatch.ingest.sonic.switch import COUNTERS_DB
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.local.redis_server import redis_server
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import decode_rates

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed"),
]
OCTETS_PER_S = 2_500_000_000  # 20 Gb/s out of Ethernet4
PFC3_PER_S = 40_000  # pause frames received on priority 3
REFRESH_S = 0.05


class Syncd:
    """Moves Ethernet4's counters at fixed rates, one refresh every REFRESH_S, as syncd would."""

    def __init__(self, db: SwitchDb) -> None:
        self._db = db
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0, last = time.time(), 0.0
        while not self._stop.wait(REFRESH_S):
            elapsed = time.time() - t0
            octets = int(OCTETS_PER_S * elapsed) - int(OCTETS_PER_S * last)
            frames = int(PFC3_PER_S * elapsed) - int(PFC3_PER_S * last)
            self._db.advance(
                {"Ethernet4": {"SAI_PORT_STAT_IF_OUT_OCTETS": octets, "SAI_PORT_STAT_PFC_3_RX_PKTS": frames}}
            )
            last = elapsed

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_the_daemon_publishes_what_a_worker_turns_into_the_switch_s_rates(broker, workers):
    with redis_server() as url:
        db = SwitchDb(url, ports=4)
        db.schedule({"PORT": 50, "QUEUE": 50}, pfcwd_ms=50)
        for w in workers:
            w.wait_ready()
        rates = Collector(broker, topics.RATES)
        syncd = Syncd(db)
        argv = ["collect", "sonic", "--redis", f"{url}/{COUNTERS_DB}", "--name", "leaf-3"]
        argv += ["--broker", broker.bootstrap, "--interval", "0.25", "--web-port", "0"]
        daemon = subprocess.Popen(
            [*fabricwatch_command(), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
        try:
            assert wait_for(lambda: len(rates.rates()) >= 6, 60)
        finally:
            daemon.send_signal(signal.SIGTERM)
            out, err = daemon.communicate(timeout=30)
            syncd.stop()
            db.close()
    assert daemon.returncode == 0, err
    assert "collected " in out
    published = [line for line in err.splitlines() if ": published " in line]
    assert published and "(0 failed, 0 dropped)" in published[0], err
    assert "refresh intervals from CONFIG_DB" in err  # it says which schedule it works to

    messages = [m for r in rates.stop() for m in decode_rates(r.value)]
    assert {m.device for m in messages} == {"leaf-3"} and all(m.device_kind == "switch" for m in messages)
    for msg in messages[1:]:  # the first rate may span the daemon's start-up
        busy = msg.ports.index("Ethernet4")
        assert msg.column("tx_bps")[busy] == pytest.approx(OCTETS_PER_S * 8, rel=0.3)
        assert msg.column("rx_pause_pps")[busy] == pytest.approx(PFC3_PER_S, rel=0.3)
        assert msg.column("tx_bps")[msg.ports.index("Ethernet0")] == 0.0
    total_s = sum(m.dt_s for m in messages[1:])
    mean_bps = sum(m.column("tx_bps")[m.ports.index("Ethernet4")] * m.dt_s for m in messages[1:]) / total_s
    assert mean_bps == pytest.approx(OCTETS_PER_S * 8, rel=0.05)
