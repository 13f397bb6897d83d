"""Trace → broker → trace through a real Kafka-protocol broker process (Tansu, memory only)."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers.paths import SCENARIOS
from helpers.waiting import wait_for

from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.schemas import topics
from fabricwatch.schemas.trace import TraceReader, read_labels
from fabricwatch.streams.kafka_io import (
    CODECS,
    DEFAULT_PARTITIONS,
    BrokerSettings,
    ensure_topics,
    load_broker_settings,
    log_ends,
    log_ends_aio,
)
from fabricwatch.streams.traces import TRAFFIC, publish_trace, record_topics

pytestmark = pytest.mark.processes  # broker, workers, servers


def records(path: Path) -> Counter:
    with TraceReader(path) as reader:
        return Counter((r.topic, r.key, r.value()) for r in reader if r.topic != topics.LABELS)


def test_replay_to_the_broker_and_record_back_loses_nothing(broker, tmp_path):
    trace = tmp_path / "demo.trace.gz"
    simulate(load_scenario(SCENARIOS / "demo.yaml", {"duration": 25}), trace)
    published = publish_trace(trace, broker)
    assert published.stats.failed == 0 and published.stats.dropped == 0
    assert published.stats.acked == published.records == sum(records(trace).values())
    assert published.skipped_labels == len(read_labels(trace)) >= 1  # ground truth stays in the file

    back = tmp_path / "back.trace"
    count = record_topics(broker, back, TRAFFIC, idle_s=3)
    assert count == published.records
    assert records(back) == records(trace)


def test_one_device_stays_in_order_on_one_partition(broker, tmp_path):
    trace = tmp_path / "t.trace"
    simulate(load_scenario(SCENARIOS / "incast.yaml", {"duration": 6}), trace)
    fresh = BrokerSettings(bootstrap=broker.bootstrap, partitions={topics.COUNTERS: 4})
    publish_trace(trace, fresh)
    back = tmp_path / "back.trace"
    record_topics(fresh, back, [topics.COUNTERS], idle_s=3)
    with TraceReader(back) as reader:
        times: dict[str, list[int]] = {}
        for r in reader:
            times.setdefault(r.key, []).append(r.ts_ns)
    assert times and all(t == sorted(t) for t in times.values())


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_the_broker_section_offers_is_read_by_every_reader(broker, codec, tmp_path):
    """A site that sets ``broker.compression`` must not find a reader that cannot decompress it: the
    sink and the alerter read with kafka-python, stage 1 and stage 2 with aiokafka, and each needs
    its own codec library (kafka-python raised UnsupportedCodecError for zstd and lz4 without them)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition
    from kafka import KafkaConsumer, TopicPartition

    from fabricwatch.streams.kafka_io import Publisher

    (tmp_path / "site.yaml").write_text(f"broker:\n  compression: {codec}\n")
    settings = load_broker_settings(tmp_path / "site.yaml", {}).with_bootstrap(broker.bootstrap)
    topic = f"test.codec.{codec}"
    ensure_topics(BrokerSettings(bootstrap=broker.bootstrap, partitions={topic: 1}), [topic])
    sent = [f"snapshot {i} ".encode() * 50 for i in range(200)]
    publisher = Publisher(settings, linger_ms=50)
    for value in sent:
        publisher.send(topic, "leaf00", value)
    publisher.flush()
    rate = publisher.metric("compression-rate-avg")  # compressed over raw: the codec was used
    assert rate == pytest.approx(1.0) if codec == "none" else rate < 0.5
    publisher.close()
    assert publisher.stats.acked == len(sent)

    consumer = KafkaConsumer(**broker.kafka_kwargs(), enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    read: list[bytes] = []
    for _ in range(50):
        read += [r.value for rs in consumer.poll(timeout_ms=100).values() for r in rs]
        if len(read) >= len(sent):
            break
    consumer.close()
    assert read == sent

    async def read_aio() -> list[bytes]:
        aio = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await aio.start()
        try:
            aio.assign([AioTopicPartition(topic, 0)])
            await aio.seek_to_beginning()
            got: list[bytes] = []
            for _ in range(50):
                got += [r.value for rs in (await aio.getmany(timeout_ms=100)).values() for r in rs]
                if len(got) >= len(sent):
                    break
            return got
        finally:
            await aio.stop()

    assert asyncio.run(read_aio()) == sent


def test_the_end_of_a_partition_is_after_its_last_record_though_the_broker_lists_less(broker):
    """Tansu lists a partition's end as the start of its last batch: readers that take that for the
    end would call a partition read while its last batch waits, or take old records for new."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition
    from kafka import KafkaConsumer, TopicPartition

    from fabricwatch.streams.kafka_io import Publisher

    topic = "test.ends"
    ensure_topics(BrokerSettings(bootstrap=broker.bootstrap, partitions={topic: 2}), [topic])
    publisher = Publisher(broker, linger_ms=200)  # one batch per partition
    for i in range(100):
        publisher.send(topic, f"device{i % 7}", b"x" * 100)
    publisher.flush()
    consumer = KafkaConsumer(**broker.kafka_kwargs(), enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    ends = log_ends(consumer, tps)
    assert sum(ends.values()) == 100
    assert not consumer.poll(timeout_ms=300)  # positioned at the end: nothing older comes
    consumer.close()

    async def read_all() -> dict:
        aio = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await aio.start()
        try:
            parts = [AioTopicPartition(topic, p) for p in (0, 1)]
            aio.assign(parts)
            await aio.seek_to_beginning(*parts)
            read = 0
            for _ in range(50):
                read += sum(len(r) for r in (await aio.getmany(timeout_ms=100)).values())
                if read == 100:
                    break
            return await log_ends_aio(aio, parts)
        finally:
            await aio.stop()

    assert sum(asyncio.run(read_all()).values()) == 100  # what stage 1 calls caught up


def test_partitions_revoked_while_their_ends_are_asked_are_answered_not_a_crash(broker):
    """Stage 1's heartbeat asks the ends of the partitions it owns; a peer joining or leaving the
    group can take them while the broker answers. aiokafka's ``highwater`` then asserted
    ('Partition is not assigned') and the worker crashed. Here the revocation is made to fall in
    that wait: the request is sent, the consumer gives up its partitions, then the answer comes."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    topic = "test.revoked"
    ensure_topics(BrokerSettings(bootstrap=broker.bootstrap, partitions={topic: 2}), [topic])

    async def ends_across_a_revocation() -> tuple[set, dict]:
        aio = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id="test-revoked",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        await aio.start()
        try:
            aio.subscribe([topic])
            for _ in range(100):
                await aio.getmany(timeout_ms=100)
                if aio.assignment():
                    break
            owned = aio.assignment()
            asking = asyncio.create_task(log_ends_aio(aio, sorted(owned)))
            await asyncio.sleep(0)  # the request is on its way
            aio.unsubscribe()  # what a rebalance does to them meanwhile
            return set(owned), await asking
        finally:
            await aio.stop()

    owned, ends = asyncio.run(ends_across_a_revocation())
    assert len(owned) == 2
    assert ends == dict.fromkeys(owned, 0)  # the broker's answer alone (an empty topic), and no crash


def test_topics_are_created_once_with_their_partitions(broker):
    first = ensure_topics(broker)
    assert ensure_topics(broker) == []
    assert set(first) <= set(DEFAULT_PARTITIONS)


def test_settings_from_file_and_environment_never_show_the_password(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "broker:\n  bootstrap: kafka-1:9092\n  security_protocol: SASL_SSL\n  sasl_mechanism: SCRAM-SHA-512\n"
    )
    s = load_broker_settings(cfg, {"FABRICWATCH_SASL_USERNAME": "fw", "FABRICWATCH_SASL_PASSWORD": "hunter2"})
    kw = s.kafka_kwargs()
    assert kw["bootstrap_servers"] == ["kafka-1:9092"] and kw["sasl_plain_password"] == "hunter2"
    assert "hunter2" not in repr(s) and "hunter2" not in str(s)


def test_cli_replays_to_the_broker_and_records_back(broker, tmp_path, capsys):
    from fabricwatch.cli.main import main

    trace = tmp_path / "t.trace"
    simulate(load_scenario(SCENARIOS / "incast.yaml", {"duration": 4}), trace)
    assert main(["replay", str(trace), "--broker", broker.bootstrap]) == 0
    assert "0 failed, 0 dropped" in capsys.readouterr().out
    back = tmp_path / "back.trace"
    argv = [
        "record",
        "--broker",
        broker.bootstrap,
        "--out",
        str(back),
        "--idle",
        "3",
        "--topic",
        topics.COUNTERS,
    ]
    assert main(argv) == 0
    assert {k for (t, k, _) in records(back)} == {k for (t, k, _) in records(trace) if t == topics.COUNTERS}


def test_unreachable_broker_is_a_clear_error(tmp_path, capsys):
    from fabricwatch.cli.main import main
    from fabricwatch.local.broker import free_port

    trace = tmp_path / "t.trace"
    simulate(load_scenario(SCENARIOS / "incast.yaml", {"duration": 2}), trace)
    dead = f"127.0.0.1:{free_port()}"
    assert main(["replay", str(trace), "--broker", dead]) == 2
    err = capsys.readouterr().err
    assert f"fabricwatch replay: broker {dead}: " in err and "`fabricwatch broker` starts one" in err
    assert "Error(" not in err and "Error:" not in err  # words, not kafka-python's class names


def test_fabricwatch_broker_serves_until_ctrl_c(tmp_path):
    """``fabricwatch broker`` prints its address, takes a replay, and stops cleanly on SIGINT."""
    proc = subprocess.Popen(
        [*fabricwatch_command(), "broker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else address
        settings = BrokerSettings(bootstrap=address)
        trace = tmp_path / "demo.trace.gz"
        simulate(load_scenario(SCENARIOS / "demo.yaml", {"duration": 5}), trace)
        published = publish_trace(trace, settings)
        assert published.stats.acked == published.records > 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130
        assert proc.stderr.read().rstrip().endswith("fabricwatch broker: stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not wait_for(lambda: _listening(address), 1.0)  # the broker process went with it


def _listening(address: str) -> bool:
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.2).close()
        return True
    except OSError:
        return False
