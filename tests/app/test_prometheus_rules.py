"""The shipped Prometheus rules (``deploy/prometheus/fabricwatch-rules.yml``) are valid, and a real
Prometheus running them alerts on a daemon whose ``/healthz`` fails and on one that is down, and
not on one that is healthy (issue 32, Found 12: a collector whose /healthz fails is an alert)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from helpers.paths import ROOT
from helpers.prometheus import prometheus
from helpers.waiting import wait_for
from prometheus_client import CollectorRegistry, Counter

from fabricwatch.local.broker import free_port
from fabricwatch.streams.metrics_server import MetricsServer

RULES = ROOT / "deploy" / "prometheus" / "fabricwatch-rules.yml"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"
)


def test_promtool_accepts_the_rules():
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed")
    done = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.processes
def test_prometheus_alerts_on_an_unhealthy_daemon_and_a_dead_one_and_not_on_a_healthy_one(tmp_path):
    sick, well = CollectorRegistry(), CollectorRegistry()
    Counter("fabricwatch_collect_polls", "polls", registry=sick).inc()
    health = {"sick": (False, "no poll finished for 31 s"), "well": (True, "")}
    dead_port = free_port()
    with (
        MetricsServer(sick, lambda: health["sick"], "127.0.0.1", 0) as sick_server,
        MetricsServer(well, lambda: health["well"], "127.0.0.1", 0) as well_server,
    ):
        with urllib.request.urlopen(f"http://127.0.0.1:{sick_server.port}/metrics", timeout=5) as r:
            assert "fabricwatch_healthy 0.0" in r.read().decode()
        jobs = {
            "fabricwatch-collect": [sick_server.port],
            "fabricwatch-sink": [well_server.port],
            "fabricwatch-alert": [dead_port],
        }
        with prometheus(tmp_path, jobs, RULES) as server:  # pending or firing: ``for`` is Prometheus'
            wanted = {
                ("FabricwatchDaemonUnhealthy", "fabricwatch-collect"),
                ("FabricwatchDaemonDown", "fabricwatch-alert"),
            }
            assert wait_for(lambda: server.alerts() >= wanted, 60), server.alerts()
            assert {job for _, job in server.alerts()} == {"fabricwatch-collect", "fabricwatch-alert"}
            health["sick"] = (True, "")  # it recovers: its alert goes
            recovered = ("FabricwatchDaemonUnhealthy", "fabricwatch-collect")
            assert wait_for(lambda: recovered not in server.alerts(), 30)
