"""What reading ``fabric.counters`` costs a consumer per message, for each compression codec the
producers may use and each Kafka client stage 1 may read with. Prints JSON lines.

    python bench/bench_consumer.py [--scenario FILE] [--duration S] [--rounds N]
        [--codecs zstd,lz4,gzip,none] [--clients kafka-python,aiokafka,confluent-kafka]

The scenario's counter snapshots (real encoded messages, NIC and switch, as the collectors send
them) are published once per codec to a topic of their own on an embedded Tansu broker, through
the collectors' own ``Publisher``. Each client then reads each topic from its beginning to its end
and does nothing else with a message than touch its value: the floor of stage 1's consumer. The
figure is CPU per message of this process (the client's own threads included); wall time is
printed beside it, but this machine is shared. Rounds alternate codecs and clients, so a busy
spell falls on all of them; the best round is the figure.

Each line: ``codec``, ``client``, ``cpu_us_per_message`` (best round), ``cpu_us_rounds``,
``messages_per_s`` (best round; the client's start-up included, which is most of a short read
for confluent-kafka), and per codec ``publish_cpu_us_per_message``, what the producer
paid to compress and send (the collectors pay it, spread over the hosts), and ``compression_rate``,
the producer's compressed over raw batch size (kafka-python's ``compression-rate-avg``): what the
broker stores and serves.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import tempfile
import time
from pathlib import Path

import msgspec

from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.broker import EmbeddedBroker
from fabricwatch.schemas import topics
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.kafka_io import CODECS, BrokerSettings, Publisher, ensure_topics

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka")
PARTITIONS = 4


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def topic_of(codec: str) -> str:
    return f"bench.counters.{codec}"


def publish(
    settings: BrokerSettings, codec: str, messages: list[tuple[str, bytes, int]]
) -> tuple[float, float]:
    """Publish ``messages`` compressed with ``codec``; CPU seconds spent, and the compression rate."""
    publisher = Publisher(msgspec.structs.replace(settings, compression=codec))
    began = time.process_time()
    for key, value, ts_ns in messages:
        publisher.send(topic_of(codec), key, value, ts_ns)
    publisher.flush()
    spent = time.process_time() - began
    rate = publisher.metric("compression-rate-avg")
    publisher.close()
    if publisher.stats.failed or publisher.stats.dropped:
        raise SystemExit(f"bench_consumer: {codec}: {publisher.stats.last_error}")
    return spent, rate


def read_kafka_python(bootstrap: str, topic: str, expected: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    count = size = 0
    while count < expected:
        for records in consumer.poll(timeout_ms=500, max_records=10_000).values():
            count += len(records)
            size += sum(len(r.value) for r in records)
    consumer.close()
    return size


def read_aiokafka(bootstrap: str, topic: str, expected: int) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def read() -> int:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        count = size = 0
        try:
            while count < expected:
                for records in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
                    count += len(records)
                    size += sum(len(r.value) for r in records)
        finally:
            await consumer.stop()
        return size

    return asyncio.run(read())


def read_confluent_kafka(bootstrap: str, topic: str, expected: int) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-consumer",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    count = size = 0
    try:
        while count < expected:
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    count += 1
                    size += len(m.value())
    finally:
        consumer.close()
    return size


READERS = {
    "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka,
    "confluent-kafka": read_confluent_kafka,
}


def counter_messages(scenario: Path, duration: int, tmp: Path) -> list[tuple[str, bytes, int]]:
    trace = tmp / "bench.trace"
    simulate(load_scenario(scenario, {"duration": duration}), trace)
    with TraceReader(trace) as reader:
        return [(r.key, r.value(), r.ts_ns) for r in reader if r.topic == topics.COUNTERS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=SCENARIOS / "large.yaml")
    ap.add_argument("--duration", type=int, default=30, help="simulated seconds of snapshots")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--clients", default=",".join(CLIENTS))
    args = ap.parse_args()
    codecs = args.codecs.split(",")
    clients = [c for c in args.clients.split(",") if _installed(c)]
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        messages = counter_messages(args.scenario, args.duration, Path(tmp))
        settings = BrokerSettings(
            bootstrap=broker.bootstrap, partitions={topic_of(c): PARTITIONS for c in codecs}
        )
        ensure_topics(settings, [topic_of(c) for c in codecs])
        raw = sum(len(v) for _, v, _ in messages)
        emit(bench="consumer_backlog", messages=len(messages), bytes_per_message=round(raw / len(messages)))
        for codec in codecs:
            cpu_s, rate = publish(settings, codec, messages)
            emit(
                bench="consumer_publish",
                codec=codec,
                publish_cpu_us_per_message=round(cpu_s / len(messages) * 1e6, 2),
                compression_rate=round(rate, 3),
            )
        cpu: dict[tuple[str, str], list[float]] = {}
        wall: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for codec in codecs:
                for client in clients:
                    began, cpu_began = time.perf_counter(), time.process_time()
                    size = READERS[client](broker.bootstrap, topic_of(codec), len(messages))
                    cpu.setdefault((codec, client), []).append(time.process_time() - cpu_began)
                    wall.setdefault((codec, client), []).append(time.perf_counter() - began)
                    if size != raw:
                        raise SystemExit(f"bench_consumer: {client} read {size} bytes of {codec}, not {raw}")
        for (codec, client), spent in cpu.items():
            emit(
                bench="consumer",
                codec=codec,
                client=client,
                cpu_us_per_message=round(min(spent) / len(messages) * 1e6, 2),
                cpu_us_rounds=[round(s / len(messages) * 1e6, 2) for s in spent],
                messages_per_s=round(len(messages) / min(wall[codec, client])),
            )


def _installed(client: str) -> bool:
    module = {"kafka-python": "kafka", "aiokafka": "aiokafka", "confluent-kafka": "confluent_kafka"}[client]
    if importlib.util.find_spec(module) is None:
        emit(bench="consumer", client=client, skipped=f"{module} is not installed")
        return False
    return True


if __name__ == "__main__":
    main()
