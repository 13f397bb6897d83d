"""``fabricwatch sink`` against a real Kafka-protocol broker (Tansu) and real ClickHouse backends:
offsets are committed only after an insert, a crash redelivers without double counting, and a
server outage is ridden out with the backlog left in Kafka."""

from __future__ import annotations

import logging
import random
import threading
import time
import urllib.error
import urllib.request

import pytest
from helpers.malformed import KINDS, make
from helpers.waiting import wait_for

from fabricwatch.local.clickhouse_server import LocalClickHouse, server_binary
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    Anomaly,
    CommGraph,
    DecodeError,
    Periods,
    Phase,
    PortRates,
    Topology,
    decode,
    encode,
)
from fabricwatch.storage.consumer import Backoff, StoreConsumer, open_store, sink_metrics
from fabricwatch.storage.sink import Sink
from fabricwatch.storage.store import Store
from fabricwatch.streams.kafka_io import BrokerSettings, Publisher, ensure_topics
from fabricwatch.streams.metrics_server import MetricsServer

pytestmark = pytest.mark.processes  # broker, workers, servers

TANSU = {"session_timeout_ms": 6000, "max_poll_interval_ms": 6000, "heartbeat_interval_ms": 1000}
ROLLUPS = ("rates_10s", "rates_1m", "rates_1h")


def publish(settings: BrokerSettings, messages: list) -> None:
    ensure_topics(settings, [topics.RATES, topics.ANOMALIES, topics.PHASES, topics.TOPOLOGY])
    pub = Publisher(settings, linger_ms=5)
    for m in messages:
        if isinstance(m, PortRates):
            pub.send(topics.RATES, m.device, encode(m), m.ts_ns)
        elif isinstance(m, Anomaly):
            pub.send(topics.ANOMALIES, m.fingerprint, encode(m), m.ts_ns)
        elif isinstance(m, Phase):
            pub.send(topics.PHASES, m.job, encode(m), m.begin_ns)
        elif isinstance(m, CommGraph):
            pub.send(topics.PHASES, m.job, encode(m), m.ts_ns)
        elif isinstance(m, Topology):
            pub.send(topics.TOPOLOGY, "fabric", encode(m), m.ts_ns)
    pub.close()
    assert pub.stats.acked == len(messages) and pub.stats.failed == pub.stats.dropped == 0


def undecodable(messages: list) -> list[tuple[str, bytes]]:
    """Every kind of malformed message (tests/helpers/malformed.py) on each topic the sink reads, keeping
    only those that cannot decode: a well-formed message of a device of its own would be stored."""
    by_topic = {
        PortRates: topics.RATES,
        Anomaly: topics.ANOMALIES,
        Phase: topics.PHASES,
        Topology: topics.TOPOLOGY,
    }
    out = []
    rng = random.Random(7)
    for kind_of, topic in by_topic.items():
        sample = encode(next(m for m in messages if isinstance(m, kind_of)))
        for i, kind in enumerate(KINDS * 3):
            value = make(kind, sample, rng, i)
            try:
                decode(value, kind_of)
            except DecodeError:
                out.append((topic, value))
    return out


def scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, name: str) -> float:
    """The value of an unlabelled series in Prometheus text (NaN when absent)."""
    return next(
        (float(line.split()[1]) for line in text.splitlines() if line.split(" ")[0] == name), float("nan")
    )


def totals(store: Store) -> dict[str, tuple]:
    out = {"raw": tuple(store.query("SELECT count(), sum(toUInt64(tx_bps)) FROM rates_raw")[0])}
    for t in ROLLUPS:
        out[t] = tuple(
            store.query(
                f"SELECT sum(n), count() FROM (SELECT sum(samples) AS n FROM {t} GROUP BY device, port, ts)"
            )[0]
        )
    out["anomalies"] = tuple(store.query("SELECT count(), uniqExact(fingerprint) FROM anomaly_events")[0])
    out["phases"] = tuple(store.query("SELECT count() FROM phases FINAL")[0])
    return out


def reference(store: Store, messages: list) -> dict[str, tuple]:
    with Sink(store) as sink:
        for m in messages:
            sink.add(m)
    return totals(store)


def test_a_crash_between_insert_and_commit_redelivers_without_double_counting(
    broker, tmp_path, fabric_stream
):
    publish(broker, fabric_stream)
    with Store.open(tmp_path / "store", "reference") as ref:
        want = reference(ref, fabric_stream)
    with Store.open(tmp_path / "store", "live") as store:
        first = StoreConsumer(broker, store, "sink-g", max_rows=1000, consumer_options=TANSU)
        deadline = time.monotonic() + 30
        while first.stats.records < len(fabric_stream) // 3 and time.monotonic() < deadline:
            first.poll_once()
            if first.sink.due():
                assert first.store_and_commit()
        assert first.stats.commits >= 1
        while first.stats.records < 2 * len(fabric_stream) // 3 and time.monotonic() < deadline:
            first.poll_once()
        first.sink.flush()  # inserted ...
        first._consumer.close(autocommit=False)  # ... and then the process died before committing

        second = StoreConsumer(broker, store, "sink-g", max_rows=1000, consumer_options=TANSU)
        stats = second.run(idle_exit_s=3.0)
        assert stats.records < len(fabric_stream)  # it resumed from the last commit, not the start
        assert second.sink_stats.rate_rows_skipped > 0  # and what was redelivered was skipped
        assert totals(store) == want

        third = StoreConsumer(broker, store, "sink-g", consumer_options=TANSU)
        assert third.run(idle_exit_s=2.0).records == 0  # everything was committed


@pytest.mark.skipif(server_binary() is None, reason="clickhouse-server is not installed")
def test_the_sink_waits_out_a_server_outage_with_kafka_holding_the_backlog(
    broker, tmp_path, fabric_stream, caplog
):
    caplog.set_level(logging.WARNING, logger="fabricwatch.storage")
    rates = [m for m in fabric_stream if isinstance(m, PortRates)][:400]
    server = LocalClickHouse(tmp_path / "server").start()
    try:
        store = Store.open(server.url())
        server.stop(kill=True)  # it crashes
        publish(broker, rates)
        consumer = StoreConsumer(
            broker,
            store,
            "sink-outage",
            max_rows=5000,
            max_delay_s=0.5,
            backoff=Backoff(0.2, 1.0),
            consumer_options=TANSU,
        )
        metrics = sink_metrics(consumer)
        stop = threading.Event()
        runner = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        with MetricsServer(metrics.registry, metrics.health, "127.0.0.1", 0) as web:
            runner.start()
            assert wait_for(lambda: consumer.stats.retries >= 3, 30) and consumer.stats.commits == 0
            healthy, detail = scrape(web.port, "healthz")
            assert healthy == 200 and "store failing" in detail  # waiting it out: alive, and it says why
            text = scrape(web.port, "metrics")[1]
            assert metric(text, "fabricwatch_sink_insert_failures_total") >= 3
            assert metric(text, "fabricwatch_sink_commits_total") == 0
            server.start()
            rows = sum(len(m.ports) for m in rates)
            assert wait_for(
                lambda: consumer.stats.commits and store.query("SELECT count() FROM rates_raw")[0][0] == rows,
                30,
            )
            assert wait_for(lambda: metric(scrape(web.port, "metrics")[1], "fabricwatch_sink_lag") == 0, 15)
            text = scrape(web.port, "metrics")[1]
            assert metric(text, "fabricwatch_sink_rate_rows_total") == rows
            assert "store failing" not in scrape(web.port, "healthz")[1]
        stop.set()
        runner.join(timeout=15)
        assert store.query("SELECT count() FROM rates_raw")[0][0] == rows
        said = [r.message for r in caplog.records if r.name == "fabricwatch.storage.consumer"]
        assert (
            said[0].startswith(f"store {store.where}: failing (")
            and "rows (the rest waits in Kafka)" in said[0]
        )
        assert (
            said[-1].startswith(f"store {store.where}: recovered after")
            and f"{rows:,} rows stored" in said[-1]
        )
        assert (
            store.query(
                "SELECT sum(n) FROM (SELECT sum(samples) AS n FROM rates_1m GROUP BY device, port, ts)"
            )[0][0]
            == rows
        )
        store.close()
    finally:
        server.stop()


def test_cli_sink_stores_what_the_broker_holds(broker, tmp_path, fabric_stream, capsys):
    from fabricwatch.cli.main import main

    publish(broker, fabric_stream)
    bad = undecodable(fabric_stream)
    pub = Publisher(broker)
    for topic, value in bad:
        pub.send(topic, "bad", value, 0)
    pub.close()
    argv = [
        "sink",
        "--broker",
        broker.bootstrap,
        "--data-dir",
        str(tmp_path / "d"),
        "--idle-exit",
        "3",
        "--rebalance-timeout",
        "6",
        "--web-port",
        "0",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = sum(len(m.ports) for m in fabric_stream if isinstance(m, PortRates))
    assert f"stored {rows} rate rows (0 already stored)" in out
    assert f"{len(bad)} malformed" in out  # every kind of malformed message, each costing only itself
    with Store.open(tmp_path / "d") as store:
        assert store.query("SELECT count() FROM rates_raw")[0][0] == rows


def test_the_sink_reads_all_of_a_restarted_broker_s_new_log(
    embedded_broker, broker, tmp_path, fabric_stream, caplog
):
    """The measured gap: a sink that had read a few records per partition, the broker restarted
    empty, more records published before the sink fetched again. Reading on from its positions in
    the old log, it stored 7 of 12; it must store every record of the new log."""
    caplog.set_level(logging.WARNING, logger="fabricwatch")
    rates = [m for m in fabric_stream if isinstance(m, PortRates)]
    before, after = rates[: len(rates) // 4], rates[len(rates) // 4 :]
    publish(broker, before)
    with Store.open(tmp_path / "store") as store:
        consumer = StoreConsumer(broker, store, "sink-restart", max_rows=100_000, consumer_options=TANSU)
        deadline = time.monotonic() + 60
        while consumer.stats.records < len(before) and time.monotonic() < deadline:
            consumer.poll_once()
        assert consumer.store_and_commit() and consumer.stats.commits == 1

        embedded_broker.restart()  # empty, offsets from zero, a new cluster id
        publish(broker, after)  # more records per partition than the sink had read before
        stats = consumer.run(idle_exit_s=5.0)

        rows = sum(len(m.ports) for m in rates)
        assert store.query("SELECT count() FROM rates_raw")[0][0] == rows
        assert stats.new_logs == 1
        said = [r.getMessage() for r in caplog.records if "is a new log" in r.getMessage()]
        assert len(said) == 1 and embedded_broker.cluster_id in said[0]


@pytest.mark.skipif(server_binary() is None, reason="clickhouse-server is not installed")
def test_the_sink_waits_for_a_server_that_is_down_when_it_starts(tmp_path, caplog):
    """Found (issue 32, 4): with ClickHouse down at start the sink printed a traceback and exited 1,
    although once running it waits out an outage."""
    caplog.set_level(logging.WARNING, logger="fabricwatch.storage")
    server = LocalClickHouse(tmp_path / "server").start()
    url = server.url()
    server.stop(kill=True)
    stop = threading.Event()
    opened: list = []
    opener = threading.Thread(target=lambda: opened.append(open_store(url, stop, Backoff(0.2, 0.5))))
    opener.start()
    assert wait_for(lambda: any("cannot open" in r.getMessage() for r in caplog.records), 15)
    assert opener.is_alive()
    server.start()
    opener.join(timeout=30)
    try:
        assert opened and opened[0] is not None and opened[0].query("SELECT 1")[0][0] == 1
        said = [r.getMessage() for r in caplog.records if r.name == "fabricwatch.storage.consumer"]
        assert len([s for s in said if "failing" in s]) == 1 and "recovered after" in said[-1]
    finally:
        if opened and opened[0] is not None:
            opened[0].close()
        server.stop()

    stop.set()  # stopped while waiting: no store, no error
    assert open_store("clickhouse://127.0.0.1:1/none", stop) is None


def test_the_sink_stores_each_nic_s_periods_once_and_a_bad_one_costs_only_itself(broker, tmp_path):
    """``fabric.rhythm`` (issue 36): what a stage-1 worker publishes of its rhythm judgments lands in
    ``nic_periods``; a message delivered twice merges away, an undecodable one is counted."""
    ensure_topics(broker, [topics.RHYTHM])
    t0 = (time.time_ns() - 3600 * 10**9) // 10**9 * 10**9
    first = Periods(
        ["h000/mlx5_0", "h001/mlx5_0"], [t0, t0], [6.0, 6.1], [0.8, 0.7], [None, 6.0], [1e9, None]
    )
    second = Periods(["h000/mlx5_0"], [t0 + 30 * 10**9], [7.8], [0.75], [6.0], [9e8])
    pub = Publisher(broker)
    for m in (first, second, first):
        pub.send(topics.RHYTHM, m.devices[0], encode(m), m.ts_ns[0])
    pub.send(topics.RHYTHM, "bad", encode(second).replace(b"7.8", b"-7.8"), t0)
    pub.close()
    with Store.open(tmp_path / "store") as store:
        consumer = StoreConsumer(broker, store, "sink-rhythm", consumer_options=TANSU)
        stats = consumer.run(idle_exit_s=3.0)
        assert stats.malformed == 1
        rows = store.query(
            "SELECT device, ts_ns, period_s, usual_s, rate_Bps FROM nic_periods FINAL ORDER BY device, ts_ns"
        )
    assert [(d, int(t) - t0, round(p, 2)) for d, t, p, _, _ in rows] == [
        ("h000/mlx5_0", 0, 6.0),
        ("h000/mlx5_0", 30 * 10**9, 7.8),
        ("h001/mlx5_0", 0, 6.1),
    ]
    assert rows[0][3] is None and rows[2][4] is None, "unknown is NULL, not zero"
