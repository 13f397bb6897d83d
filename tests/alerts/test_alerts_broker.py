"""``fabricwatch alert`` against a real Kafka-protocol broker (Tansu): offsets are committed only
after delivery, and a consumer restarted before delivery re-sends the same notifications (same
idempotency keys), which the receiver drops as duplicates."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.request

import msgspec
import pytest
from helpers.malformed import KINDS, make
from helpers.waiting import wait_for

from fabricwatch.alerts.config import parse_alerts
from fabricwatch.alerts.consumer import ConsumerStats, OffsetTracker, run_consumer
from fabricwatch.alerts.receiver import WebhookReceiver
from fabricwatch.local.broker import EmbeddedBroker
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, RootCause, decode, encode
from fabricwatch.streams.kafka_io import BrokerSettings, Publisher, ensure_topics

GROUP = "alerts-test"
pytestmark = pytest.mark.processes  # broker, workers, servers

TANSU = {"session_timeout_ms": 6000, "max_poll_interval_ms": 6000, "heartbeat_interval_ms": 1000}


def anomalies(status: str) -> list[Anomaly]:
    start = 1_800_000_000_000_000_000
    return [
        Anomaly(
            f"fp{i}",
            "incast",
            "warning",
            status,
            start,
            start + (10**9 if status == "resolved" else 0),
            RootCause(f"leaf-{i}", "Ethernet8", 3),
            f"incast {i}",
            end_ns=start + 10**9 if status == "resolved" else None,
        )
        for i in range(3)
    ]


def committed(settings: BrokerSettings) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(**settings.kafka_kwargs(), group_id=GROUP, enable_auto_commit=False)
    try:
        parts = c.partitions_for_topic(topics.ANOMALIES) or set()
        found = {p: c.committed(TopicPartition(topics.ANOMALIES, p)) for p in parts}
        return {p: off for p, off in found.items() if off is not None and off >= 0}
    finally:
        c.close()


def ends(settings: BrokerSettings) -> dict[int, int]:
    """Per partition, the offset after its last message, read back: Tansu's ListOffsets can answer
    short of it (seen: 1 for two records sent together)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(**settings.kafka_kwargs(), consumer_timeout_ms=1000)
    try:
        c.assign([TopicPartition(topics.ANOMALIES, p) for p in c.partitions_for_topic(topics.ANOMALIES)])
        c.seek_to_beginning()
        return {m.partition: m.offset + 1 for m in c}
    finally:
        c.close()


def prompt(rx: WebhookReceiver):
    """Every alert its own group, sent at once, retried after 100 ms: to one receiver."""
    return parse_alerts(
        {
            "receivers": [{"name": "rx", "url": rx.url, "backoff_initial": "100ms"}],
            "route": {"receiver": "rx", "group_by": ["..."], "group_wait": 0, "group_interval": "200ms"},
        },
        environ={},
    )


class Consumer:
    def __init__(self, settings: BrokerSettings, config, **options: int) -> None:
        self.stop = threading.Event()
        self.stats = ConsumerStats()  # counted into as it runs
        self.thread = threading.Thread(
            target=self._run,
            args=(settings, config, self.stop, GROUP),
            kwargs={
                "commit_interval_s": 0.2,
                "drain_s": 0.3,
                "consumer_options": TANSU | options,
                "stats": self.stats,
            },
            daemon=True,
        )
        self.thread.start()

    def _run(self, *args, **kwargs) -> None:
        self.stats = run_consumer(*args, **kwargs)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive()


def test_offsets_are_committed_after_delivery_and_restarts_lose_nothing():
    behaviour = {"now": "hang"}
    with EmbeddedBroker() as b, WebhookReceiver(behaviour=lambda k, a: behaviour["now"], hang_s=0.8) as rx:
        settings = BrokerSettings(bootstrap=b.bootstrap)
        ensure_topics(settings, [topics.ANOMALIES])
        config = parse_alerts(
            {
                "receivers": [
                    {
                        "name": "rx",
                        "url": rx.url,
                        "timeout": "300ms",
                        "backoff_initial": "100ms",
                        "backoff_max": "200ms",
                        "give_up_after": "1h",
                    }
                ],
                "route": {"receiver": "rx", "group_by": ["..."], "group_wait": 0, "group_interval": "200ms"},
            },
            environ={},
        )
        publisher = Publisher(settings, linger_ms=0)
        for a in anomalies("firing"):
            publisher.send(topics.ANOMALIES, a.fingerprint, encode(a))
        publisher.flush(10)

        # The receiver processes each request only after the sender's timeout: nothing counts as
        # delivered, so nothing may be committed, although the receiver did get the three.
        first = Consumer(settings, config)
        assert wait_for(lambda: len(rx.accepted) == 3)
        first.close()
        # A sleep is the behaviour here: requests the closed consumer had in flight still reach the
        # (hanging) receiver, and nothing says when they have all arrived.
        time.sleep(1.5)
        assert set(committed(settings).values()) <= {0}  # nothing past the first anomaly
        keys = {r.key for r in rx.accepted}
        before = len(rx.duplicates)

        # Restarted with a healthy receiver: the same notifications again, with the same keys,
        # re-sent by the second consumer (not the first one's retries still arriving).
        behaviour["now"] = "ok"
        second = Consumer(settings, config)
        assert wait_for(lambda: set(rx.duplicates[before:]) >= keys)
        second.close()
        # Delivered now, but the three alerts are open: their offsets stay uncommitted, so that
        # a restart rebuilds them and their resolutions are not lost.
        assert set(committed(settings).values()) <= {0}

        third = Consumer(settings, config)
        for a in anomalies("resolved"):
            publisher.send(topics.ANOMALIES, a.fingerprint, encode(a))
        publisher.close()
        assert wait_for(lambda: len(rx.accepted) == 6)
        assert wait_for(lambda: committed(settings) == ends(settings), 10)
        third.close()
        assert sum(ends(settings).values()) == 6 and committed(settings) == ends(settings)

    assert len({r.key for r in rx.accepted}) == 6
    statuses = {(r.body["alerts"][0]["fingerprint"], r.body["status"]) for r in rx.accepted}
    assert statuses == {(f"fp{i}", s) for i in range(3) for s in ("firing", "resolved")}


def test_a_restarted_broker_s_new_log_is_read_from_its_beginning(caplog):
    """The broker restarts empty while the alerter holds positions in its old log; new anomalies
    arrive before the alerter reconnects (its reconnect backoff is made long to be sure of it).
    Reading on from the old positions would skip them; each must be delivered, once."""
    caplog.set_level(logging.WARNING, logger="fabricwatch")
    with EmbeddedBroker() as b, WebhookReceiver() as rx:
        settings = BrokerSettings(bootstrap=b.bootstrap)
        ensure_topics(settings, [topics.ANOMALIES])
        config = prompt(rx)
        publisher = Publisher(settings, linger_ms=0)
        for a in anomalies("firing"):
            publisher.send(topics.ANOMALIES, a.fingerprint, encode(a))
        publisher.close()
        consumer = Consumer(settings, config, reconnect_backoff_ms=4000, reconnect_backoff_max_ms=4000)
        assert wait_for(lambda: len(rx.accepted) == 3)

        b.restart()
        ensure_topics(settings, [topics.ANOMALIES])
        later = [
            msgspec.structs.replace(
                a, fingerprint=f"new-{a.fingerprint}", root=RootCause(f"new-{i}", "Ethernet8", 3)
            )
            for i, a in enumerate(anomalies("firing"))
        ]
        publisher = Publisher(settings, linger_ms=0)
        for a in anomalies("resolved") + later:
            publisher.send(topics.ANOMALIES, a.fingerprint, encode(a))
        publisher.close()

        assert wait_for(lambda: len(rx.accepted) == 9, 30)
        assert wait_for(lambda: any("is a new log" in r.getMessage() for r in caplog.records), 15)
        # The new log's six records, re-read from its beginning, are ingested: none notifies twice.
        assert wait_for(lambda: consumer.stats.consumed >= 9, 15)
        consumer.close()
    statuses = {(r.body["alerts"][0]["fingerprint"], r.body["status"]) for r in rx.accepted}
    assert statuses == {
        (f"{p}fp{i}", s) for i in range(3) for p, s in [("", "firing"), ("", "resolved"), ("new-", "firing")]
    }
    assert consumer.stats.new_logs == 1 and len({r.key for r in rx.accepted}) == 9


def test_offset_tracker_commits_the_lowest_offset_not_done():
    t = OffsetTracker()
    for off in (0, 1, 2):
        t.hold("p", off)
    t.hold("p", 1, 2)  # offset 1 joined two groups
    t.done(t.token("p", 0))
    assert t.committable() == {"p": 1}
    t.done(t.token("p", 2))
    t.done(t.token("p", 1))
    assert t.committable() == {"p": 1}
    t.done(t.token("p", 1))
    t.done(t.token("p", 1))
    assert t.committable() == {"p": 3} and t.in_flight() == 0
    t.done(t.token("q", 5))  # released before hold said how many: the sum still comes back to zero
    t.hold("q", 5, 1)
    assert t.committable() == {"p": 3, "q": 6}


def test_offsets_of_an_old_log_change_nothing_once_the_broker_is_a_new_one():
    t = OffsetTracker()
    t.hold("p", 7)
    old = t.token("p", 7)  # an alert opened before the broker restarted holds this
    t.new_log()
    t.hold("p", 0)
    t.done(old)  # the alert ends now: its offset is in a log that is gone
    assert t.committable() == {"p": 0} and t.in_flight() == 1
    t.done(t.token("p", 0))
    assert t.committable() == {"p": 1}


def test_given_up_notifications_go_to_the_give_up_topic_and_their_offsets_are_committed(tmp_path):
    from kafka import KafkaConsumer, TopicPartition

    with EmbeddedBroker() as b, WebhookReceiver(behaviour=lambda k, a: "400") as rx:
        settings = BrokerSettings(bootstrap=b.bootstrap)
        ensure_topics(settings, [topics.ANOMALIES])
        config = parse_alerts(
            {
                "receivers": [{"name": "rx", "url": rx.url}],
                "route": {"receiver": "rx", "group_by": ["..."], "group_wait": 0, "group_interval": "200ms"},
                "give_up_topic": "fabric.alerts.giveup",
                "give_up_log": str(tmp_path / "giveup.jsonl"),
            },
            environ={},
        )
        publisher = Publisher(settings, linger_ms=0)
        publisher.send(topics.ANOMALIES, "fp0", encode(anomalies("firing")[0]))
        publisher.send(topics.ANOMALIES, "fp0", encode(anomalies("resolved")[0]))
        publisher.close()
        consumer = Consumer(settings, config)
        assert wait_for(lambda: committed(settings) == ends(settings), 20)
        consumer.close()

        reader = KafkaConsumer(**settings.kafka_kwargs(), consumer_timeout_ms=3000)
        reader.assign([TopicPartition("fabric.alerts.giveup", 0)])
        reader.seek_to_beginning()
        records = [json.loads(m.value) for m in reader]
        reader.close()
    assert rx.requests == 2 and rx.accepted == []
    assert [(r["error"], r["status"], r["body"]["alerts"][0]["fingerprint"]) for r in records] == [
        ("HTTP 400", "firing", "fp0"),
        ("HTTP 400", "resolved", "fp0"),
    ]
    assert [json.loads(line) for line in (tmp_path / "giveup.jsonl").read_text().splitlines()] == records


def test_the_anomaly_that_opens_an_alert_is_held_until_the_alert_has_ended():
    from fabricwatch.alerts.alerter import Alerter

    config = parse_alerts(
        {
            "receivers": [{"name": "rx", "url": "http://127.0.0.1:9/"}],
            "route": {"receiver": "rx", "group_wait": 0},
        },
        environ={},
    )
    al, t = Alerter(config), OffsetTracker()
    fire, resolve = anomalies("firing")[0], anomalies("resolved")[0]
    t.hold("p", 0)
    t.hold("p", 0, al.ingest(fire, 0.0, t.token("p", 0)))
    t.done(t.token("p", 0))
    for token in (tok for n in al.advance(0.0).notifications for tok in n.tokens):
        t.done(token)  # delivered
    assert t.committable() == {"p": 0}  # the alert is open: offset 0 stays uncommitted
    t.hold("p", 1)
    t.hold("p", 1, al.ingest(resolve, 400.0, t.token("p", 1)))
    t.done(t.token("p", 1))
    step = al.advance(400.0)
    for token in [*step.released, *(tok for n in step.notifications for tok in n.tokens)]:
        t.done(token)
    assert t.committable() == {"p": 2}


def test_malformed_anomalies_cost_only_themselves_and_are_committed():
    """Every kind of malformed message on fabric.anomalies (deep nesting included): each skipped,
    counted and committed past; the good anomaly among them is delivered."""
    good = anomalies("firing")[0]
    rng = random.Random(8)
    bad = []
    for i, kind in enumerate(KINDS * 2):
        value = make(kind, encode(good), rng, i)
        try:
            decode(value, Anomaly)
        except DecodeError:
            bad.append(value)
    with EmbeddedBroker() as b, WebhookReceiver(behaviour=lambda k, a: "ok") as rx:
        settings = BrokerSettings(bootstrap=b.bootstrap)
        ensure_topics(settings, [topics.ANOMALIES])
        config = parse_alerts(
            {
                "receivers": [{"name": "rx", "url": rx.url}],
                "route": {"receiver": "rx", "group_wait": 0, "group_interval": "200ms"},
            },
            environ={},
        )
        publisher = Publisher(settings, linger_ms=0)
        for value in bad:
            publisher.send(topics.ANOMALIES, good.fingerprint, value)  # one partition, in order
        publisher.send(topics.ANOMALIES, good.fingerprint, encode(good))
        publisher.send(topics.ANOMALIES, good.fingerprint, encode(anomalies("resolved")[0]))
        publisher.close()
        stop = threading.Event()
        stats: list = []
        thread = threading.Thread(
            target=lambda: stats.append(
                run_consumer(
                    settings, config, stop, GROUP, commit_interval_s=0.2, drain_s=0.3, consumer_options=TANSU
                )
            ),
            daemon=True,
        )
        thread.start()
        assert wait_for(lambda: [r.body["status"] for r in rx.accepted] == ["firing", "resolved"])
        assert wait_for(lambda: committed(settings) == ends(settings), 10)
        stop.set()
        thread.join(timeout=20)
    assert stats[0].malformed == len(bad) >= len(KINDS)


def test_the_alerter_serves_its_deliveries_repeats_and_queue_on_metrics():
    """Found (issue 32, 5): the alerter could not be watched. Each firing event is sent twice (a
    worker's restart repeats what it said): the repeats change nothing, and are counted."""
    from fabricwatch.local.broker import free_port

    web = free_port()
    with EmbeddedBroker() as b, WebhookReceiver() as rx:
        settings = BrokerSettings(bootstrap=b.bootstrap)
        ensure_topics(settings, [topics.ANOMALIES])
        config = prompt(rx)
        publisher = Publisher(settings, linger_ms=0)
        for a in anomalies("firing") * 2:
            publisher.send(topics.ANOMALIES, a.fingerprint, encode(a))
        publisher.close()
        stop = threading.Event()
        runner = threading.Thread(
            target=run_consumer,
            args=(settings, config, stop, GROUP),
            kwargs={"consumer_options": TANSU, "web": ("127.0.0.1", web), "drain_s": 0.3},
        )
        runner.start()
        try:
            assert wait_for(lambda: len(rx.accepted) == 3, 30)
            text = wait_for_text(web, 'fabricwatch_alert_delivered_total{receiver="rx"} 3.0')
            assert (
                "fabricwatch_alert_repeats_total 3.0" in text
                and "fabricwatch_alert_anomalies_total 6.0" in text
            )
            assert 'fabricwatch_alert_given_up_total{receiver="rx"} 0.0' in text
            assert "fabricwatch_alert_queued_notifications 0.0" in text
            with urllib.request.urlopen(f"http://127.0.0.1:{web}/healthz", timeout=5) as answer:
                assert answer.status == 200 and json.load(answer)["healthy"] is True
        finally:
            stop.set()
            runner.join(timeout=20)
    assert len(rx.accepted) == 3  # the repeats notified nobody


def wait_for_text(port: int, needle: str) -> str:
    """The alerter's /metrics once it holds ``needle`` (the last scrape otherwise)."""
    got = [""]

    def scraped() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            got[0] = answer.read().decode()
        return needle in got[0]

    assert wait_for(scraped, 20), got[0]
    return got[0]
