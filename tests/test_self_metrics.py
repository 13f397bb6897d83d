"""Every daemon's /metrics is written by prometheus-client and parses as Prometheus text; the
collector's /healthz turns unhealthy when polls stop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch.collector_metrics import CollectMetrics
from fabricwatch.ingest.collect import CollectStats
from fabricwatch.streams.health import Progress
from fabricwatch.streams.metrics_server import MetricsServer


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_worker_s_counts_come_out_as_prometheus_text():
    progress = Progress()
    progress.processed("snapshots", 40)
    progress.dead_letter("not valid JSON: nested too deeply")
    got = samples(progress.prometheus(lag=7).decode())
    assert got[("fabricwatch_processed_total", (("what", "snapshots"),))] == 40
    assert got[("fabricwatch_dead_letters_total", (("reason", "not_json"),))] == 1
    assert got[("fabricwatch_consumer_lag", ())] == 7


def test_a_worker_says_what_it_sent_and_what_its_stages_cost_beside_the_process():
    """What a capacity plan needs: messages out per topic, and the stages' CPU against the whole
    process's (the difference is the framework's)."""
    progress = Progress()
    progress.sent["fabric.rates"] += 3
    progress.core_cpu_s["stage1"] += 0.25
    got = samples(progress.prometheus(lag=0).decode())
    assert got[("fabricwatch_sent_total", (("topic", "fabric.rates"),))] == 3
    assert got[("fabricwatch_core_cpu_seconds_total", (("stage", "stage1"),))] == 0.25
    assert got[("process_cpu_seconds_total", ())] > 0


def test_the_collector_serves_its_metrics_and_says_when_polls_stopped():
    now = [100.0]
    stats = CollectStats(polls=3, late_polls=1, snapshots=24, problems={"mlx5_1": 2})
    metrics = CollectMetrics(stats, 1.0, lambda: {"acked": 20, "failed": 1}, clock=lambda: now[0])
    metrics.observe_poll(0.004)
    with MetricsServer(metrics.registry, metrics.health, "127.0.0.1", 0) as server:
        base = f"http://127.0.0.1:{server.port}"
        got = samples(urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode())
        assert got[("fabricwatch_collect_poll_duration_seconds_count", ())] == 1
        assert got[("fabricwatch_collect_poll_duration_seconds_bucket", (("le", "0.005"),))] == 1
        assert got[("fabricwatch_collect_late_polls_total", ())] == 1
        assert got[("fabricwatch_collect_read_errors_total", (("device", "mlx5_1"),))] == 2
        assert got[("fabricwatch_collect_messages_total", (("outcome", "failed"),))] == 1
        assert json.load(urllib.request.urlopen(f"{base}/healthz", timeout=5))["healthy"] is True
        now[0] += 10  # no poll for 10 s at a 1 s interval
        with pytest.raises(urllib.error.HTTPError) as unhealthy:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert unhealthy.value.code == 503
        assert "no poll finished for 10 s" in json.load(unhealthy.value)["detail"]
