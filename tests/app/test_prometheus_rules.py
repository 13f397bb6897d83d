"""The shipped Prometheus rules (``deploy/prometheus/fabricwatch-rules.yml``) are valid, and a real
Prometheus running them alerts on a daemon whose ``/healthz`` fails and on one that is down, and
not on one that is healthy (issue 32, Found 12: a collector whose /healthz fails is an alert)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request

import pytest
from helpers.paths import ROOT
from helpers.waiting import wait_for
from prometheus_client import CollectorRegistry, Counter

from fabricwatch.local.broker import free_port
from fabricwatch.streams.metrics_server import MetricsServer

RULES = ROOT / "deploy" / "prometheus" / "fabricwatch-rules.yml"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"
)


def scrape(job: str, port: int) -> str:
    return f"  - {{job_name: {job}, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}\n"


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
    dead_port, prometheus_port = free_port(), free_port()
    with (
        MetricsServer(sick, lambda: health["sick"], "127.0.0.1", 0) as sick_server,
        MetricsServer(well, lambda: health["well"], "127.0.0.1", 0) as well_server,
    ):
        with urllib.request.urlopen(f"http://127.0.0.1:{sick_server.port}/metrics", timeout=5) as r:
            assert "fabricwatch_healthy 0.0" in r.read().decode()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: ['{RULES}']\n"
            "scrape_configs:\n"
            + scrape("fabricwatch-collect", sick_server.port)
            + scrape("fabricwatch-sink", well_server.port)
            + scrape("fabricwatch-alert", dead_port)
        )
        server = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def alerts() -> set[tuple[str, str]]:
                """(alert, job) of every alert pending or firing: ``for`` is Prometheus' to keep."""
                try:
                    url = f"http://127.0.0.1:{prometheus_port}/api/v1/alerts"
                    with urllib.request.urlopen(url, timeout=2) as response:
                        found = json.load(response)["data"]["alerts"]
                except OSError:
                    return set()  # not up yet
                return {(a["labels"]["alertname"], a["labels"]["job"]) for a in found}

            wanted = {
                ("FabricwatchDaemonUnhealthy", "fabricwatch-collect"),
                ("FabricwatchDaemonDown", "fabricwatch-alert"),
            }
            assert wait_for(lambda: alerts() >= wanted, 60), alerts()
            assert {job for _, job in alerts()} == {"fabricwatch-collect", "fabricwatch-alert"}
            health["sick"] = (True, "")  # it recovers: its alert goes
            assert wait_for(lambda: ("FabricwatchDaemonUnhealthy", "fabricwatch-collect") not in alerts(), 30)
        finally:
            server.terminate()
            server.wait(timeout=30)
