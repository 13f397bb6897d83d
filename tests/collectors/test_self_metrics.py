"""Every daemon's /metrics is written by prometheus-client and parses as Prometheus text; the
collector's /healthz turns unhealthy when polls stop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch.collectors.metrics import CollectMetrics
from fabricwatch.collectors.phase_metrics import PhaseMetrics
from fabricwatch.ingest.nic.poll import CollectStats
from fabricwatch.ingest.phases.log_tail import TailStats
from fabricwatch.ingest.phases.nccl_phases import ReadStats
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


def test_the_phase_collector_says_once_and_on_healthz_that_it_follows_nothing():
    """Logs written where the unit does not look: each read succeeds on no file, forever. After a
    minute the collector says so once and /healthz turns unhealthy, until a file appears."""
    now = [100.0]
    tail = TailStats()
    metrics = PhaseMetrics(tail, ReadStats(), lambda: 0, 0.2, clock=lambda: now[0])
    said = []
    for _ in range(400):  # 80 s of reads at 0.2 s
        now[0] += 0.2
        said.append(metrics.observe_read(0.001))
    words = [s for s in said if s]
    assert len(words) == 1 and words[0].startswith("following no file for 60 s")
    assert metrics.health() == (False, "following no file for 80 s: nothing matches the --log patterns")
    tail.files = 1  # a job started and logs there
    now[0] += 0.2
    assert metrics.observe_read(0.001) is None
    assert metrics.health()[0] is True
