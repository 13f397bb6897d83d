"""Latency of alert delivery, from anomaly produced to webhook received, at a steady rate.

A receiver process on 127.0.0.1 (``alerts.receiver.WebhookReceiver``, so the receiving side has a
core of its own) records when each notification arrives. The producer sends firing anomalies at
``--rate`` per second, each a new alert, with ``group_wait: 0`` and ``group_by: ['...']``, so every
anomaly is one webhook. Latency runs from the anomaly's scheduled send time (so a producer that
falls behind counts against us) to its arrival at the receiver; ``alerter_cpu_us_per_anomaly`` is
the CPU the alerting process spent per anomaly (with ``--broker``, including its Kafka consumer),
which says what a loaded machine leaves of the latency budget. Prints JSON lines:

    python bench/bench_alerts.py [--rate 1000] [--seconds 10] [--concurrency 8] [--broker]

Without ``--broker`` the anomalies go to the alerter in process; with it they are published to an
embedded Tansu broker and consumed by ``fabricwatch alert``'s consumer (``run_consumer``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import threading
import time
from typing import Any

from children import answer

from fabricwatch.alerts.config import AlertsConfig, parse_alerts
from fabricwatch.schemas.messages import Anomaly, RootCause

TARGET_P99_MS = 200.0


def receiver_process(conn: Any) -> None:
    """Serve until told to stop, then send back (fingerprint, arrival time) of every alert."""
    from fabricwatch.alerts.receiver import WebhookReceiver

    with WebhookReceiver() as rx:
        conn.send(rx.url)
        conn.recv()
        conn.send([(a["fingerprint"], r.at) for r in rx.accepted for a in r.body["alerts"]])


def make_config(url: str, concurrency: int) -> AlertsConfig:
    receiver = {
        "name": "bench",
        "url": url,
        "timeout": "5s",
        "concurrency": concurrency,
        "queue_size": 100_000,
    }
    route = {"receiver": "bench", "group_by": ["..."], "group_wait": "0s", "group_interval": "5m"}
    return parse_alerts({"receivers": [receiver], "route": route}, "bench", environ={})


def anomaly(i: int, now_ns: int) -> Anomaly:
    root = RootCause(f"leaf-{i % 64}", f"Ethernet{i // 64}", 3)
    return Anomaly(
        f"bench{i:08d}", "incast", "warning", "firing", now_ns, now_ns, root, f"incast {i}",
        hint="check the collective", devices=[root.device], jobs=["llm-a"], evidence={"peak_kb": 900},
    )  # fmt: skip


def paced(rate: float, seconds: float, send: Any) -> dict[str, float]:
    """Call ``send(i, scheduled_time)`` at ``rate`` per second; return when each was scheduled."""
    count = int(rate * seconds)
    scheduled: dict[str, float] = {}
    start = time.time() + 0.2
    for i in range(count):
        at = start + i / rate
        delay = at - time.time()
        if delay > 0:
            time.sleep(delay)
        scheduled[f"bench{i:08d}"] = at
        send(i, at)
    return scheduled


def run_in_process(config: AlertsConfig, rate: float, seconds: float) -> tuple[dict[str, float], Any]:
    from fabricwatch.alerts.service import AlertService

    service = AlertService(config)
    scheduled = paced(rate, seconds, lambda i, at: service.ingest(anomaly(i, int(at * 1e9))))
    service.drain(30)
    stats = dict(vars(service.queues["bench"].stats))
    service.close()
    return scheduled, stats


def producer_process(bootstrap: str, rate: float, seconds: float, conn: Any) -> None:
    """Publish anomalies keyed by fingerprint at ``rate``, as the detection pipeline would, from a
    process of its own; send back when each was scheduled."""
    from fabricwatch.schemas import topics
    from fabricwatch.schemas.messages import encode
    from fabricwatch.streams.kafka_io import BrokerSettings, Publisher

    publisher = Publisher(BrokerSettings(bootstrap=bootstrap, compression="none"), linger_ms=1)

    def send(i: int, at: float) -> None:
        a = anomaly(i, int(at * 1e9))
        publisher.send(topics.ANOMALIES, a.fingerprint, encode(a))

    conn.recv()
    scheduled = paced(rate, seconds, send)
    publisher.close()
    conn.send((scheduled, vars(publisher.stats)))


def run_broker(config: AlertsConfig, rate: float, seconds: float) -> tuple[dict[str, float], Any]:
    from fabricwatch.alerts.consumer import run_consumer
    from fabricwatch.local.broker import EmbeddedBroker
    from fabricwatch.schemas import topics
    from fabricwatch.streams.kafka_io import BrokerSettings, ensure_topics

    with EmbeddedBroker() as broker:
        settings = BrokerSettings(bootstrap=broker.bootstrap)
        ensure_topics(settings, [topics.ANOMALIES])
        stop = threading.Event()
        options = {
            "session_timeout_ms": 6000,
            "max_poll_interval_ms": 6000,
            "heartbeat_interval_ms": 1000,
            # Tansu holds fetches open while data arrives (300/s: p50 128 ms at Kafka's default
            # 500 ms wait, 9 ms at 10 ms); Kafka answers once fetch_min_bytes=1 is there.
            "fetch_max_wait_ms": 10,
        }
        holder: dict[str, Any] = {}
        consumer = threading.Thread(
            target=lambda: holder.update(
                stats=run_consumer(settings, config, stop, "bench", consumer_options=options)
            )
        )
        consumer.start()
        here, there = mp.Pipe()
        producer = mp.get_context("spawn").Process(
            target=producer_process, args=(broker.bootstrap, rate, seconds, there), daemon=True
        )
        producer.start()
        time.sleep(8)  # the consumer group join (Tansu waits out the rebalance timeout)
        here.send("go")
        scheduled, published = answer(producer, here, "the producing child")
        producer.join(10)
        time.sleep(3)
        stop.set()
        consumer.join()
        return scheduled, vars(holder["stats"]) | {"publisher": published}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="anomalies per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight to the receiver")
    parser.add_argument(
        "--broker", action="store_true", help="through an embedded Kafka broker and the consumer"
    )
    args = parser.parse_args()

    here, there = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=receiver_process, args=(there,), daemon=True)
    proc.start()
    url = answer(proc, here, "the webhook receiver child")
    config = make_config(url, args.concurrency)
    run = run_broker if args.broker else run_in_process
    cpu = time.process_time()
    scheduled, stats = run(config, args.rate, args.seconds)
    cpu = time.process_time() - cpu
    here.send("stop")
    arrivals = dict(answer(proc, here, "the webhook receiver child"))
    proc.join(5)

    latencies = [(arrivals[fp] - at) * 1000 for fp, at in scheduled.items() if fp in arrivals]
    p99 = percentile(latencies, 0.99)
    print(
        json.dumps(
            {
                "bench": "alerts_broker" if args.broker else "alerts_in_process",
                "rate_per_s": args.rate,
                "anomalies": len(scheduled),
                "received": len(latencies),
                "lost": len(scheduled) - len(latencies),
                "concurrency": args.concurrency,
                "p50_ms": round(percentile(latencies, 0.50), 2),
                "p99_ms": round(p99, 2),
                "max_ms": round(max(latencies, default=float("nan")), 2),
                "target_p99_ms": TARGET_P99_MS,
                "alerter_cpu_us_per_anomaly": round(cpu / max(1, len(scheduled)) * 1e6, 1),
                "ok": p99 <= TARGET_P99_MS and len(latencies) == len(scheduled),
                "stats": stats,
            }
        )
    )


if __name__ == "__main__":
    main()
