"""Faust workers as separate processes against a real Kafka-protocol broker (Tansu)."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from helpers.job_scenarios import STORM, STRAGGLER, job_incidents, job_trace
from helpers.streaming import (
    LOSSY_LINKS,
    POLL_NS,
    SESSION_TIMEOUT_S,
    TANSU_GROUP,
    Collector,
    Reference,
    anomalies_in,
    demo_on_workers,
    firing,
    in_process,
    polls_on,
    stored_polls,
    trace,
)
from helpers.waiting import wait_for
from kafka import KafkaProducer

from fabricwatch.alerts.config import parse_alerts
from fabricwatch.alerts.consumer import run_consumer
from fabricwatch.alerts.receiver import WebhookReceiver
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.workers import WorkerProcess
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import decode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.storage.consumer import StoreConsumer
from fabricwatch.storage.store import Store
from fabricwatch.streams import stage1_agent
from fabricwatch.streams.kafka_io import Publisher, ensure_topics, log_ends
from fabricwatch.streams.traces import Pace, publish_trace

pytestmark = pytest.mark.processes  # broker, workers, servers

DEEP = b'{"type":"snapshot","x":' + b"[" * 3000 + b"]" * 3000 + b"}"
"""6 KB nested 3,000 deep: a poison pill for a decoder that lets RecursionError escape."""


def test_two_workers_find_what_the_in_process_replay_finds(broker, workers, tmp_path):
    path = trace(tmp_path, duration=110)
    expected = firing(in_process(path))
    assert {k for k, _ in expected} == {"incast", "pfc_storm", "ecmp_collapse"}
    for w in workers:
        w.wait_ready()
    out = Collector(broker, topics.ANOMALIES)
    published = publish_trace(path, broker, speed=0)
    assert published.stats.failed == published.stats.dropped == 0
    assert wait_for(lambda: expected.keys() <= firing([decode(r.value) for r in out.records]).keys(), 90)
    got = firing([decode(r.value) for r in out.stop()])
    assert got.keys() == expected.keys(), (sorted(got), sorted(expected))
    for key, start in expected.items():
        assert abs(got[key] - start) <= POLL_NS, key

    def stages() -> set[str]:
        seen: set[str] = set()
        for w in workers:
            status, body = w.get("healthz")
            assert status == 200, body
            seen |= json.loads(body)["stages"].keys()
        return seen

    # How far behind each stage is, for an operator. The job stage says so once it judges: 5 s
    # after stage 2's first progress mark, which may be after the trace's incidents are all out.
    assert wait_for(lambda: stages() == {"stage1", "stage2", "jobs"}, 30, 0.5), stages()
    snapshots = sum(w.metric("processed_total", 'what="snapshots"') for w in workers)
    assert snapshots >= published.records - 100  # every counters record, less phases and topology


def test_two_workers_find_the_lossy_links_the_in_process_replay_finds(broker, workers, tmp_path):
    """Issue 34: a link's two ends are read by whichever workers own their devices, and stage 2
    joins them into one incident at the same part as in process; the burst stays quiet. The
    paced detectors (a failing optic, a degrading link) check each device on its own time, so
    they find what they find in process whichever worker reads it."""
    scenario = tmp_path / "lossy.yaml"
    scenario.write_text(LOSSY_LINKS)
    path = tmp_path / "lossy.trace.gz"
    simulate(load_scenario(scenario), path)
    expected = Reference(path)
    assert {(k, d) for k, d in expected.firing} == {
        ("link_corruption", "h003/mlx5_0"),
        ("link_corruption", "leaf00"),
        ("optics_out_of_range", "h006/mlx5_0"),
        ("link_degrading", "h010/mlx5_0"),
    }
    for w in workers:
        w.wait_ready()
    out = Collector(broker, topics.ANOMALIES)
    publish_trace(path, broker, speed=0)
    assert wait_for(lambda: expected.all_seen(out), 90)
    expected.assert_found(out.stop())


def test_two_workers_tie_a_jobs_hang_to_the_storm_that_caused_it_and_page_once(broker, workers, tmp_path):
    """Issue 35: a job spans pods, so its incidents are judged by the worker owning its phases
    partition, against the incidents every stage 2 publishes, as far as they have all judged. The
    storm holding the job's AllReduce is its hang's cause, as in process, and the alerter pages the
    storm alone: the hang is muted while its cause fires. Published at twice real time, as a live
    fabric's records come (at full speed a replay outruns the alerter's view of the storm: see
    docs/jobs.md)."""
    path = job_trace(tmp_path, "storm", STORM, duration=40)
    events = replay_trace(path, Pipeline(DetectorConfig())).anomalies
    expected = job_incidents(events, {a.fingerprint: a.kind for a in events})
    assert ("job_hang", "firing", "llm-a", "pfc_storm") in expected
    with WebhookReceiver() as rx:
        stop = threading.Event()
        alerter = threading.Thread(
            target=run_consumer,
            args=(broker, _page_each_alert(rx), stop, "alerts-test"),
            kwargs={"commit_interval_s": 0.2, "drain_s": 0.3, "consumer_options": TANSU_GROUP},
            daemon=True,
        )
        alerter.start()
        for w in workers:
            w.wait_ready()
        out = Collector(broker, topics.ANOMALIES)
        publish_trace(path, broker, speed=2)

        def ended() -> bool:
            got = anomalies_in(out.records)
            return ("job_hang", "resolved") in {(a.kind, a.status) for a in got}

        assert wait_for(ended, 90)
        got = anomalies_in(out.stop())
        assert job_incidents(got, {a.fingerprint: a.kind for a in got}) == expected
        storm = next(a.fingerprint for a in got if a.kind == "pfc_storm")
        assert wait_for(lambda: storm in _paged(rx), 30)
        stop.set()
        alerter.join(timeout=20)
    assert _paged(rx) == {storm}, "one page for the pair: the storm's"


def test_a_restarted_job_owner_rebuilds_the_jobs_baselines_from_the_topic(broker, tmp_path):
    """Issue 35: a job's baselines survive a worker restart. The job's owner is restarted as one
    of its hosts starts entering each AllReduce 50 ms late; its successor reads the job's recent
    records again, so the slow calls meet the baseline of the fast ones before them and the
    slowdown is found, caused by the straggler, as in process. (Without them, the first calls it
    sees are the slow ones, its baseline: only the straggler is found, as the test shows when the
    successor starts at the end of the partitions.)"""
    path = job_trace(tmp_path, "straggler", STRAGGLER)
    events = replay_trace(path, Pipeline(DetectorConfig())).anomalies
    expected = job_incidents(events, {a.fingerprint: a.kind for a in events})
    assert ("job_slowdown", "firing", "llm-a", "job_straggler") in expected
    ensure_topics(broker)
    with TraceReader(path) as reader:
        cut_ns = next(r.ts_ns for r in reader if r.topic == topics.COUNTERS) + 30 * 10**9
    first = WorkerProcess(broker.bootstrap, tmp_path / "first.log", SESSION_TIMEOUT_S)
    try:
        first.wait_ready()
        out = Collector(broker, topics.ANOMALIES)
        before = _publish_part(path, broker, lambda ts: ts < cut_ns, speed=8)
        assert wait_for(lambda: first.metric("processed_total", 'what="snapshots"') >= before, 60)
    finally:
        first.stop()
    second = WorkerProcess(broker.bootstrap, tmp_path / "second.log", SESSION_TIMEOUT_S)
    try:
        second.wait_ready()
        _publish_part(path, broker, lambda ts: ts >= cut_ns, speed=4)

        def ended() -> bool:
            return ("job_slowdown", "resolved") in {(a.kind, a.status) for a in anomalies_in(out.records)}

        assert wait_for(ended, 90)
        got = anomalies_in(out.stop())
    finally:
        second.stop()
    assert job_incidents(got, {a.fingerprint: a.kind for a in got}) == expected


def _publish_part(path, broker, keep, speed: float = 0.0) -> int:
    """The trace's topology and its records whose time ``keep`` takes, at ``speed`` times their
    pace (0: at once); how many counters records went."""
    publisher = Publisher(broker, linger_ms=0)
    pace = Pace(speed, time.monotonic())
    counters = 0
    with TraceReader(path) as reader:
        for rec in reader:
            if rec.topic == topics.LABELS or not (rec.topic == topics.TOPOLOGY or keep(rec.ts_ns)):
                continue
            if speed > 0:
                time.sleep(max(0.0, pace.due(rec.ts_ns) - time.monotonic()))
            publisher.send(rec.topic, rec.key, rec.value(), rec.ts_ns)
            counters += rec.topic == topics.COUNTERS
    publisher.close()
    return counters


def _page_each_alert(rx: WebhookReceiver):
    """Every alert its own group, sent at once, to one receiver."""
    return parse_alerts(
        {
            "receivers": [{"name": "rx", "url": rx.url, "backoff_initial": "100ms"}],
            "route": {"receiver": "rx", "group_by": ["..."], "group_wait": 0, "group_interval": "200ms"},
        },
        environ={},
    )


def _paged(rx: WebhookReceiver) -> set[str]:
    """The fingerprints the receiver was told are firing."""
    return {a["fingerprint"] for r in rx.accepted for a in r.body["alerts"] if a["status"] == "firing"}


def test_an_upgraded_worker_starts_where_the_faust_group_of_earlier_builds_left_counters(broker, tmp_path):
    """Earlier builds read counters in the Faust group (``fabricwatch``); stage 1's own group starts
    from those offsets, so an upgrade neither re-reads what they processed nor skips the rest."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    ensure_topics(broker)
    (tmp_path / "earlier").mkdir()
    (tmp_path / "later").mkdir()
    earlier, later = trace(tmp_path / "earlier", duration=10), trace(tmp_path / "later", duration=10)
    with TraceReader(later) as reader:
        counters = sum(1 for r in reader if r.topic == topics.COUNTERS)  # the same in either trace
    publish_trace(earlier, broker)
    old = KafkaConsumer(group_id="fabricwatch", enable_auto_commit=False, **broker.kafka_kwargs())
    parts = [TopicPartition(topics.COUNTERS, p) for p in sorted(old.partitions_for_topic(topics.COUNTERS))]
    ends = log_ends(old, parts)
    assert sum(ends.values()) == counters
    old.commit({tp: OffsetAndMetadata(ends[tp], "", -1) for tp in parts})  # all processed by the old build
    old.close()
    publish_trace(later, broker)
    worker = WorkerProcess(broker.bootstrap, tmp_path / "w.log", SESSION_TIMEOUT_S)
    try:
        worker.wait_ready()
        assert wait_for(lambda: worker.metric("processed_total", 'what="snapshots"') >= counters, 60)
        # Anything of the earlier trace would have come before the worker caught up with the topic.
        assert wait_for(lambda: worker.metric("consumer_lag") == 0, 30)
        assert worker.metric("processed_total", 'what="snapshots"') == counters
    finally:
        assert worker.stop() == 0


def test_killing_a_worker_loses_no_anomaly(broker, workers, tmp_path):
    path, expected, out = demo_on_workers(broker, workers, tmp_path)
    feeder = threading.Thread(target=publish_trace, args=(path, broker, 5.0))
    feeder.start()
    # Kill one worker mid-stream: once the first incident fired, with the others still to come.
    assert wait_for(lambda: firing([decode(r.value) for r in out.records]), 60)
    assert not expected.firing.keys() <= firing([decode(r.value) for r in out.records]).keys()
    workers[0].stop(signal.SIGKILL)  # no goodbye: its partitions move after the session timeout
    assert not workers[0].state_dir.exists()  # and nothing of it is left in the temp directory
    feeder.join()
    assert wait_for(lambda: expected.all_seen(out), 120)  # the end of every incident that ended, too
    expected.assert_found(out.stop())


def test_workers_joining_and_leaving_beside_running_ones_crash_no_peer_and_lose_no_anomaly(
    broker, workers, tmp_path
):
    """A scale event or a rolling update: a third worker joins and leaves three times while the
    fabric streams in. Every join and every leave is a rebalance that takes partitions from the
    running workers, sometimes while stage 1's heartbeat waits for the broker (a peer died of that,
    twice in six such runs, before log_ends_aio stopped asking aiokafka's highwater of partitions
    no longer assigned). No
    peer may crash, the visitor must stop within its grace time, and no incident may be lost."""
    path, expected, out = demo_on_workers(broker, workers, tmp_path)
    feeder = threading.Thread(target=publish_trace, args=(path, broker, 3.0))
    feeder.start()
    for visit in range(3):  # bounded: three joins and three leaves
        with WorkerProcess(broker.bootstrap, tmp_path / f"visitor{visit}.log", SESSION_TIMEOUT_S) as visitor:
            visitor.wait_ready()
            for w in workers:
                w.check()  # a peer that crashed in the join says why here
            started = time.monotonic()
        assert visitor.proc.returncode == 0, (tmp_path / f"visitor{visit}.log").read_text()[-2000:]
        assert time.monotonic() - started < 30  # within WorkerProcess.stop's grace
        for w in workers:
            w.check()
    feeder.join()
    assert wait_for(lambda: expected.all_seen(out), 120)
    for w in workers:
        w.check()
        assert "Crashed" not in w.log_path.read_text()
    expected.assert_found(out.stop())


def test_sigterm_during_a_rebalance_stops_a_worker_within_its_grace_and_loses_no_anomaly(
    broker, workers, tmp_path
):
    """Found: once in about eleven stops, a worker given SIGTERM while its group rebalanced hung at
    ``Stopping...``, deaf to a second TERM. Here a visitor is stopped while it joins (the running
    workers rebalance with it): at three points of the join, bounded, while the fabric streams in.
    Each must exit 0 within ``WorkerProcess.stop``'s 30 s grace (a hang is killed, and fails), and
    the peers must carry on and lose nothing."""
    path, expected, out = demo_on_workers(broker, workers, tmp_path)
    feeder = threading.Thread(target=publish_trace, args=(path, broker, 3.0))
    feeder.start()
    for visit, after_s in enumerate((0.5, 1.5, 3.0)):  # after its start line, inside the join
        log = tmp_path / f"joining{visit}.log"
        visitor = WorkerProcess(broker.bootstrap, log, SESSION_TIMEOUT_S)
        assert wait_for(lambda log=log: "starting with" in log.read_text(), 60), log.read_text()
        time.sleep(after_s)
        ready = visitor.get("ready")[0] == 200
        started = time.monotonic()
        code = visitor.stop(signal.SIGTERM)
        took = time.monotonic() - started
        assert code == 0 and took < 30, f"exit {code} after {took:.0f} s: {log.read_text()[-2000:]}"
        assert not ready, "stopped after the join, not during it"
        for w in workers:
            w.check()
    feeder.join()
    assert wait_for(lambda: expected.all_seen(out), 120)
    expected.assert_found(out.stop())


def test_a_broker_restart_mid_stream_loses_no_anomaly_and_no_stored_row(
    embedded_broker, broker, workers, tmp_path
):
    """The embedded broker (memory only) restarts empty while a trace is published: the publisher
    holds its sends until it is back, the workers and the sink carry on in its new log."""
    path, expected, out = demo_on_workers(broker, workers, tmp_path)
    with Store.open(tmp_path / "store") as store:
        sink = StoreConsumer(broker, store, max_delay_s=0.5, consumer_options=TANSU_GROUP)
        stop_sink = threading.Event()
        sinking = threading.Thread(target=sink.run, args=(stop_sink,), daemon=True)
        sinking.start()
        try:
            published: list = []
            feeder = threading.Thread(target=lambda: published.append(publish_trace(path, broker, 5.0)))
            feeder.start()
            assert wait_for(lambda: firing([decode(r.value) for r in out.records]), 60)
            embedded_broker.restart()  # empty, offsets from zero
            ensure_topics(broker)  # as `fabricwatch broker` does at each start
            feeder.join()
            assert published[0].stats.failed == published[0].stats.dropped == 0  # held, then sent
            assert wait_for(lambda: expected.all_seen(out), 120)
            expected.assert_found(out.stop())

            in_new_log = polls_on(broker, topics.RATES)
            if not wait_for(lambda: in_new_log <= stored_polls(store), 60):  # all the broker still held
                missing = sorted(in_new_log - stored_polls(store))
                newest = {
                    d: int(t)
                    for d, t in store.query("SELECT device, max(ts_ns) FROM rates_raw GROUP BY device")
                }
                behind = sum(t <= newest.get(d, 0) for d, t in missing)
                pytest.fail(
                    f"{len(missing)} polls of the new log not stored, {behind} of them at or before their "
                    f"device's newest stored poll (so taken for redeliveries): {missing[:5]}"
                )
        finally:
            stop_sink.set()
            sinking.join(timeout=20)
        assert sink.stats.new_logs == 1


def test_malformed_and_oversized_input_goes_to_the_dead_letter_topic(broker, workers):
    for w in workers:
        w.wait_ready()
    dead = Collector(broker, topics.DEADLETTER)
    producer = KafkaProducer(**broker.kafka_kwargs(), max_request_size=8_000_000)
    bad = {
        b"not json": "not valid JSON",
        b'{"type":"snapshot","device":"leaf00"}': "Object missing required field",
        b'{"type":"phase","job":"j"}': "Invalid value 'phase' - at `$.type`",
        b"{" + b" " * 5_000_000 + b"}": "oversized: 5000002 bytes",
        DEEP: "not valid JSON: nested too deeply",
    }
    for i, value in enumerate(bad):
        producer.send(topics.COUNTERS, key=f"dev{i}".encode(), value=value)
    for topic in (topics.PHASES, topics.TOPOLOGY):  # read by every worker, outside Faust's agents
        producer.send(topic, key=b"j", value=DEEP)
    producer.flush()
    producer.close()
    assert wait_for(lambda: len(dead.records) >= len(bad), 30) and dead.caught_up()
    records = dead.stop()
    assert len(records) == len(bad)
    for r in records:
        headers = {k: v.decode() for k, v in r.headers}
        assert headers["topic"] == topics.COUNTERS
        assert bad[r.value].split(":")[0] in headers["reason"], headers
    assert {r.value for r in records} == set(bad)  # the original bytes, kept whole
    assert wait_for(
        lambda: sum(w.metric("dead_letters_total") for w in workers) == len(bad) + 2 * len(workers)
    )
    for w in workers:
        status, body = w.get("healthz")
        assert status == 200, body
    for w in workers:
        assert w.proc.poll() is None  # a worker never dies on input


def test_worker_health_endpoints_answer_json(broker, workers):
    for w in workers:
        w.wait_ready()
    status, body = workers[0].get("healthz")
    assert status == 200 and json.loads(body)["healthy"] is True


def test_a_stopped_worker_has_committed_what_it_processed(broker, tmp_path):
    from kafka import KafkaAdminClient

    ensure_topics(broker)
    path = trace(tmp_path, duration=20)
    worker = WorkerProcess(broker.bootstrap, tmp_path / "w.log", SESSION_TIMEOUT_S)
    try:
        worker.wait_ready()
        publish_trace(path, broker)
        with TraceReader(path) as reader:
            counters = sum(1 for r in reader if r.topic == topics.COUNTERS)
        assert wait_for(lambda: worker.metric("processed_total", 'what="snapshots"') >= counters, 60)
    finally:
        assert worker.stop() == 0  # SIGTERM: a clean exit
    admin = KafkaAdminClient(**broker.kafka_kwargs())
    group = stage1_agent.group_id("fabricwatch")
    committed = admin.list_group_offsets(group)[group]
    admin.close()
    done = sum(o.offset for tp, o in committed.items() if tp.topic == topics.COUNTERS)
    assert done == counters  # a restart would start after the last snapshot, not redo any
