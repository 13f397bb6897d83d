"""End-to-end streaming: counter values/s through a broker and the Faust workers, beside a bare
kafka-python consumer of the same topic in the same run; then latency from snapshot produced to
anomaly produced under a chosen load. Prints JSON lines.

    python bench/bench_streaming.py [--scenario FILE] [--duration S] [--workers N] [--load VALUES_PER_S]
        [--partitions P] [--no-latency] [--compression CODEC]

1. Simulates the scenario (256 hosts by default) and publishes its snapshots to an embedded Tansu
   broker as a backlog.
2. Bare consumer: one kafka-python consumer reads every message of ``fabric.counters`` and does
   nothing with it: the ceiling of reading the topic in Python. The broker's CPU while it takes
   the backlog and while it serves that read says what one broker core serves.
3. End to end: N worker processes consume the same backlog (decode, rates, detectors, producing
   rates and symptoms, stage 2); throughput is read off their /metrics while they drain it.
4. Latency: with the workers caught up, the scenario is published again live, at the pace that
   gives ``--load`` counter values/s, its clock starting now. For every anomaly event the latency
   is its produce time (broker timestamp) minus the wall time at which the snapshot of the
   anomaly's time was published. The same for symptoms (stage 1 alone), which are many more.

Everything shares this machine's cores (broker, workers, publisher, this process), so the figures
are a floor for a deployment where the broker runs elsewhere. Beside the wall-clock ratio to the
bare consumer, which a shared machine moves a lot, the CPU-time ratio (the bare consumer's CPU per
value over the workers') moves less; the broker's own CPU over the drain says when the curve bends
at the broker rather than the workers.

Scale mode: ``--workers N --partitions P --no-latency`` over a backlog long enough to drain for tens
of seconds (``--duration``: the backlog is published once, before any worker starts, so the
single-threaded publisher does not limit the drain).
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client import ProcessCollector

from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.broker import EmbeddedBroker
from fabricwatch.local.processes import ChildError
from fabricwatch.local.workers import WorkerProcess
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, Symptom, SymptomBatch, decode
from fabricwatch.schemas.trace import TraceReader
from fabricwatch.streams.kafka_io import CODECS, DEFAULT_PARTITIONS, BrokerSettings, ensure_topics, log_ends
from fabricwatch.streams.traces import publish_trace

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def bare_consumer(settings: BrokerSettings, expected: int) -> tuple[float, float]:
    """Seconds for one consumer to read ``expected`` messages of the counters topic, and the CPU
    seconds this process spent on it."""
    consumer = KafkaConsumer(**settings.kafka_kwargs(), enable_auto_commit=False)
    parts = consumer.partitions_for_topic(topics.COUNTERS)
    tps = [TopicPartition(topics.COUNTERS, p) for p in sorted(parts)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    count, started, cpu = 0, time.perf_counter(), time.process_time()
    while count < expected:
        for records in consumer.poll(timeout_ms=500, max_records=10_000).values():
            count += len(records)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    consumer.close()
    return elapsed, cpu


def process_cpu_s(pid: int | None) -> float:
    """User and system CPU seconds of a process so far, as the workers' /metrics read their own
    (prometheus-client's process collector); NaN if it is gone."""
    families = ProcessCollector(pid=lambda: pid, registry=None).collect() if pid else []
    cpu = [s.value for f in families if f.name == "process_cpu_seconds" for s in f.samples]
    return cpu[0] if cpu else float("nan")


def readings(w: WorkerProcess) -> dict[str, float]:
    """One scrape of a worker's /metrics: what the drain figures need."""
    status, text = w.get("metrics")
    out = dict.fromkeys(("snapshots", "values", "sent", "cpu", "core"), 0.0)
    if status != 200:
        return out
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        if series.startswith("fabricwatch_processed_total") and 'what="snapshots"' in series:
            out["snapshots"] += float(value)
        elif series.startswith("fabricwatch_processed_total") and 'what="values"' in series:
            out["values"] += float(value)
        elif series.startswith("fabricwatch_sent_total"):
            out["sent"] += float(value)
        elif series.startswith("fabricwatch_core_cpu_seconds_total"):
            out["core"] += float(value)
        elif series == "process_cpu_seconds_total":
            out["cpu"] += float(value)
    return out


def drain(workers: list[WorkerProcess], snapshots: int, total_values: int) -> dict[str, float]:
    """Throughput while the workers drain the backlog: the middle 80% of it, so that the group's
    join at the start and the last partition's tail do not count. Over the same stretch, per
    worker: messages in and out per second, and the share of its CPU spent outside the pure
    stages (``streams/stages.py``: decoding, detectors, encoding), i.e. in Faust, aiokafka and
    the producer."""
    samples: list[tuple[float, list[dict[str, float]]]] = []
    while True:
        for w in workers:
            w.check()  # a worker that died stops the benchmark with its reason
        now = time.perf_counter()
        each = [readings(w) for w in workers]
        samples.append((now, each))
        if sum(r["snapshots"] for r in each) >= snapshots:
            break
        time.sleep(0.25)

    def total(sample: tuple[float, list[dict[str, float]]], what: str) -> float:
        return sum(r[what] for r in sample[1])

    lo = next(s for s in samples if total(s, "values") >= 0.1 * total_values)
    hi = next(s for s in samples if total(s, "values") >= 0.9 * total_values)
    # The last sample before any value was processed: the drain began after it.
    before = samples[max(0, next(i for i, s in enumerate(samples) if total(s, "values") > 0) - 1)]
    if hi[0] <= lo[0]:  # drained between two samples: the whole backlog is all there is
        lo, hi = before, samples[-1]
    span = hi[0] - lo[0]
    cpu = total(hi, "cpu") - total(lo, "cpu")
    return {
        "sustained_values_per_s": (total(hi, "values") - total(lo, "values")) / span,
        "whole_backlog_s": samples[-1][0] - before[0],
        "messages_in_per_s_per_worker": (total(hi, "snapshots") - total(lo, "snapshots"))
        / span
        / len(workers),
        "messages_out_per_s_per_worker": (total(hi, "sent") - total(lo, "sent")) / span / len(workers),
        "worker_cpu_share": cpu / span / len(workers),
        "worker_cpu_per_value_s": cpu / (total(hi, "values") - total(lo, "values")),
        "cpu_share_outside_stages": 1 - (total(hi, "core") - total(lo, "core")) / cpu
        if cpu > 0
        else float("nan"),
    }


def latency(
    settings: BrokerSettings,
    workers: list[WorkerProcess],
    scenario: Path,
    duration: int,
    load: float,
    tmp: Path,
) -> None:
    trace = tmp / "live.trace"
    stats = simulate(load_scenario(scenario, {"duration": duration, "start_time": time.time_ns()}), trace)
    speed = load / (stats.values / stats.simulated_seconds)
    watcher = KafkaConsumer(**settings.kafka_kwargs(), enable_auto_commit=False)
    tps = [
        TopicPartition(t, p)
        for t in (topics.ANOMALIES, topics.SYMPTOMS)
        for p in sorted(watcher.partitions_for_topic(t))
    ]
    log_ends(watcher, tps)
    sent: dict[int, float] = {}
    feeder = threading.Thread(target=feed, args=(trace, settings, speed, sent))
    feeder.start()
    anomaly_s: list[tuple[int, int]] = []
    symptom_s: list[tuple[int, int]] = []
    labels: list[str] = []
    quiet_until = None
    while quiet_until is None or time.time() < quiet_until:
        for w in workers:
            w.check()
        for records in watcher.poll(timeout_ms=200).values():
            for r in records:
                msg = decode(r.value)
                if isinstance(msg, Anomaly):
                    anomaly_s.append((r.timestamp, msg.ts_ns))
                    labels.append(f"{msg.kind} {msg.status}")
                items = msg.items if isinstance(msg, SymptomBatch) else [msg]
                symptom_s += [(r.timestamp, s.ts_ns) for s in items if isinstance(s, Symptom)]
        if quiet_until is None and not feeder.is_alive():
            quiet_until = time.time() + 5
    watcher.close()
    times = sorted(sent)

    def delays(events: list[tuple[int, int]]) -> list[float]:
        """Produce time minus the wall time at which the newest snapshot not after the event's
        time was sent (a resolution's time may fall between polls)."""
        out = []
        for produced_ms, ts_ns in events:
            i = max(0, bisect.bisect_right(times, ts_ns) - 1)
            out.append(produced_ms / 1000 - sent[times[i]])
        return out

    anomalies, symptoms = delays(anomaly_s), delays(symptom_s)
    emit(
        bench="streaming_latency",
        load_values_per_s=round(stats.values / stats.simulated_seconds * speed),
        speed=round(speed, 2),
        anomaly_events=len(anomalies),
        anomaly_p50_s=round(_quantile(anomalies, 0.5), 3),
        anomaly_p99_s=round(_quantile(anomalies, 0.99), 3),
        anomaly_max_s=round(max(anomalies, default=float("nan")), 3),
        anomaly_events_s=[[label, round(d, 3)] for label, d in zip(labels, anomalies, strict=True)],
        symptoms=len(symptoms),
        symptom_p50_s=round(_quantile(symptoms, 0.5), 3),
        symptom_p99_s=round(_quantile(symptoms, 0.99), 3),
    )


def feed(trace: Path, settings: BrokerSettings, speed: float, sent: dict[int, float]) -> None:
    """Publish at ``speed`` x the trace's pace, noting when the broker acknowledged each snapshot
    time: that is when the snapshot was produced. One Python producer standing in for hundreds of
    collectors queues a poll's burst for a while before the broker has it; that wait is the load
    generator's, not the pipeline's. It sends uncompressed (loopback) to leave the shared cores to
    the broker and the workers."""
    producer = KafkaProducer(
        **settings.kafka_kwargs(), linger_ms=5, batch_size=512 * 1024, max_request_size=8 * 1024 * 1024
    )

    def acked(ts_ns: int, _metadata: object) -> None:
        sent.setdefault(ts_ns, time.time())

    started = time.time()
    first_ns = None
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic == topics.LABELS:
                continue
            first_ns = rec.ts_ns if first_ns is None else first_ns
            delay = started + (rec.ts_ns - first_ns) / 1e9 / speed - time.time()
            if delay > 0:
                time.sleep(delay)
            key = rec.key.encode() if rec.key is not None else None
            future = producer.send(rec.topic, key=key, value=rec.value(), timestamp_ms=rec.ts_ns // 1_000_000)
            future.add_callback(acked, rec.ts_ns)
    producer.flush()
    producer.close()


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=SCENARIOS / "large.yaml")
    ap.add_argument("--duration", type=int, default=120, help="simulated seconds of backlog")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--load", type=float, default=500_000, help="counter values/s for the latency run")
    ap.add_argument("--latency-duration", type=int, default=200, help="simulated seconds fed live")
    ap.add_argument("--config", type=Path, default=None, help="the workers' config file (their --config)")
    ap.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS[topics.COUNTERS],
        help="partitions of fabric.counters (and of the workers' state topic)",
    )
    ap.add_argument("--no-latency", action="store_true", help="drain only (the scale mode)")
    ap.add_argument(
        "--compression",
        choices=CODECS,
        default=BrokerSettings().compression,
        help="the publisher's codec (broker.compression; default as the collectors')",
    )
    args = ap.parse_args()
    try:
        run(args)
    except ChildError as exc:  # the others were stopped on the way out
        sys.exit(f"bench_streaming: {exc}")


def run(args: argparse.Namespace) -> None:
    """Backlog, bare consumer, end to end, latency: in one broker, in this order."""
    with tempfile.TemporaryDirectory() as tmp_dir, EmbeddedBroker() as broker:
        tmp = Path(tmp_dir)
        settings = BrokerSettings(
            bootstrap=broker.bootstrap,
            partitions={topics.COUNTERS: args.partitions},
            compression=args.compression,
        )
        ensure_topics(settings)
        trace = tmp / "backlog.trace"
        stats = simulate(load_scenario(args.scenario, {"duration": args.duration}), trace)
        broker_cpu = process_cpu_s(broker.pid)
        published = publish_trace(trace, settings)
        broker_cpu = process_cpu_s(broker.pid) - broker_cpu
        emit(
            bench="streaming_backlog",
            scenario=args.scenario.name,
            compression=args.compression,
            snapshots=stats.snapshots,
            values=stats.values,
            values_per_snapshot=round(stats.values / stats.snapshots, 1),
            publish_values_per_s=round(stats.values / published.wall_s),
            broker_cpu_us_per_message=round(broker_cpu / stats.snapshots * 1e6, 2),
        )
        broker_cpu = process_cpu_s(broker.pid)
        bare_s, bare_cpu_s = bare_consumer(settings, stats.snapshots)
        broker_cpu = process_cpu_s(broker.pid) - broker_cpu
        bare = stats.values / bare_s
        emit(
            bench="bare_consumer",
            values_per_s=round(bare),
            messages_per_s=round(stats.snapshots / bare_s),
            cpu_us_per_message=round(bare_cpu_s / stats.snapshots * 1e6, 2),
            broker_cpu_share=round(broker_cpu / bare_s, 2),
            broker_cpu_us_per_message=round(broker_cpu / stats.snapshots * 1e6, 2),
        )

        extra = ["--config", str(args.config)] if args.config else []
        workers = [
            WorkerProcess(settings.bootstrap, tmp / f"w{i}.log", extra_args=extra)
            for i in range(args.workers)
        ]
        try:
            broker_cpu = process_cpu_s(broker.pid)
            e2e = drain(workers, stats.snapshots, stats.values)
            broker_cpu = process_cpu_s(broker.pid) - broker_cpu
            emit(
                bench="end_to_end",
                workers=args.workers,
                partitions=args.partitions,
                values_per_s=round(e2e["sustained_values_per_s"]),
                ratio_to_bare=round(e2e["sustained_values_per_s"] / bare, 3),
                whole_backlog_s=round(e2e["whole_backlog_s"], 1),
                messages_in_per_s_per_worker=round(e2e["messages_in_per_s_per_worker"]),
                messages_out_per_s_per_worker=round(e2e["messages_out_per_s_per_worker"]),
                worker_cpu_share=round(e2e["worker_cpu_share"], 2),
                cpu_share_outside_stages=round(e2e["cpu_share_outside_stages"], 3),
                cpu_ratio_to_bare=round(bare_cpu_s / stats.values / e2e["worker_cpu_per_value_s"], 3),
                broker_cpu_share=round(broker_cpu / e2e["whole_backlog_s"], 2),
                target_values_per_s=1_000_000,
                target_ratio=0.35,
            )
            if not args.no_latency:
                latency(settings, workers, args.scenario, args.latency_duration, args.load, tmp)
        finally:
            for w in workers:
                w.stop()


if __name__ == "__main__":
    main()
