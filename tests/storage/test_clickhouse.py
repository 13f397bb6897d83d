"""ClickHouse storage on both backends: chdb in process and a real clickhouse-server (18.16) process.

Every test that takes ``store_target`` runs twice, once per backend, with the same SQL."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import numpy as np
import pytest
from helpers.comm_graphs import stored_gather
from helpers.job_records import inspector_example_calls, inspector_examples, kineto_example_steps
from helpers.paths import DOCS

from fabricwatch.local.broker import free_port
from fabricwatch.local.clickhouse_server import LocalClickHouse, server_binary
from fabricwatch.schemas.messages import (
    PORT_RATE_COLUMNS,
    Anomaly,
    CommGraph,
    Periods,
    Phase,
    PortRates,
    RatesBatch,
    RootCause,
    Step,
    Steps,
    Topology,
    decode,
    encode,
)
from fabricwatch.storage.backends import ServerAddress, StoreError
from fabricwatch.storage.migrations import LATEST_VERSION, MIGRATIONS, full_ddl
from fabricwatch.storage.queries import host_pairs, job_phases, jobs_in_range
from fabricwatch.storage.schema import MODERN, OLD_DEBIAN, SchemaOptions
from fabricwatch.storage.sink import Sink
from fabricwatch.storage.store import Store

pytestmark = pytest.mark.slow  # embedded ClickHouse and a real server

ROLLUPS = ("rates_10s", "rates_1m", "rates_1h")
ROLLUP_SECONDS = {"rates_10s": 10, "rates_1m": 60, "rates_1h": 3600}


def feed(sink: Sink, messages: list) -> None:
    for m in messages:
        sink.add(m)
        sink.maybe_flush()


def rate_rows(messages: list) -> int:
    return sum(len(m.ports) for m in messages if isinstance(m, PortRates))


def rollup(store: Store, table: str) -> list[tuple]:
    """A rollup's content, merged."""
    return store.query(
        f"SELECT device, port, ts, sum(samples), sum(tx_bps_sum) / sum(tx_bps_n), "
        f"max(rx_pause_frac_max), max(watermark_bytes_max_max) "
        f"FROM {table} GROUP BY device, port, ts ORDER BY device, port, ts"
    )


def rollup_from_raw(store: Store, table: str) -> list[tuple]:
    """What ``rollup`` must return, computed from the raw rows."""
    seconds = ROLLUP_SECONDS[table]
    return store.query(
        f"SELECT device, port, toDateTime(intDiv(ts_ns, {seconds * 10**9}) * {seconds}, 'UTC') AS t, "
        f"count(), avg(tx_bps), max(rx_pause_frac), max(watermark_bytes_max) "
        f"FROM rates_raw GROUP BY device, port, t ORDER BY device, port, t"
    )


def assert_same_rollup(got: list[tuple], want: list[tuple], table: str) -> None:
    """Keys and counts exactly; averages to float precision (merge order may differ)."""
    assert [r[:4] for r in got] == [r[:4] for r in want], table
    for g, w in zip(got, want, strict=True):
        assert [x is None for x in g[4:]] == [x is None for x in w[4:]], (table, g[:3])  # NULL: no value
        known = [(x, y) for x, y in zip(g[4:], w[4:], strict=True) if y is not None]
        assert [x for x, _ in known] == pytest.approx([y for _, y in known], rel=1e-12, nan_ok=True), (
            table,
            g[:3],
        )


def count(store: Store, table: str) -> int:
    return int(store.query(f"SELECT count() FROM {table}")[0][0])


# --- DDL -----------------------------------------------------------------------------------------


def test_ddl_for_the_old_server_leaves_out_what_it_cannot_take():
    old = "\n".join(full_ddl(OLD_DEBIAN))
    new = "\n".join(full_ddl(MODERN))
    for clause in ("TTL ", "LowCardinality", "DateTime64", "CODEC("):
        assert clause not in old
        assert clause in new
    # the same tables and views either way
    names = re.compile(r"CREATE (?:TABLE|MATERIALIZED VIEW) IF NOT EXISTS (\S+)")
    assert names.findall(old) == names.findall(new)
    assert "ORDER BY (device, port, ts, ts_ns)" in old and "PARTITION BY toDate(ts)" in old


def test_cluster_ddl_is_on_cluster_with_distributed_fronts():
    ddl = full_ddl(MODERN, SchemaOptions(cluster="fabric", replicated=True))
    creates = [s for s in ddl if s.startswith("CREATE")]
    assert all(" ON CLUSTER fabric" in s.splitlines()[0] for s in creates)
    locals_ = re.findall(r"CREATE TABLE IF NOT EXISTS fabricwatch\.(\w+)_local ON CLUSTER", "\n".join(ddl))
    fronts = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"CREATE TABLE IF NOT EXISTS fabricwatch\.(\w+) ON CLUSTER fabric AS fabricwatch\.\w+_local\n"
            r"ENGINE = Distributed\(fabric, fabricwatch, (\w+)_local, [^)]+\)+",
            "\n".join(ddl),
        )
    }
    assert set(locals_) == set(fronts) and all(k == v for k, v in fronts.items())
    assert {"rates_raw", "rates_10s", "anomaly_events", "topology_ecmp", "schema_version"} <= set(fronts)
    raw = next(s for s in ddl if "rates_raw_local ON CLUSTER" in s)
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/fabricwatch/rates_raw', '{replica}')" in raw
    )
    # rates shard by device, so a device's polls and rollups stay on one shard
    assert "Distributed(fabric, fabricwatch, rates_raw_local, cityHash64(device))" in "\n".join(ddl)
    # views read and write shard-local tables
    for mv in (s for s in ddl if "MATERIALIZED VIEW" in s):
        assert re.search(r"\nTO fabricwatch\.\w+_local\n", mv) and "FROM fabricwatch." in mv
        assert re.search(r"FROM fabricwatch\.\w+_local", mv)
    # without a cluster: none of it
    plain = "\n".join(full_ddl(MODERN))
    assert "ON CLUSTER" not in plain and "Distributed" not in plain and "_local" not in plain


def test_bad_schema_options_are_clear_errors():
    with pytest.raises(ValueError, match="not a plain identifier"):
        SchemaOptions(database="fw; DROP TABLE x")
    with pytest.raises(ValueError, match="at least 1 day"):
        SchemaOptions(raw_ttl_days=0)
    with pytest.raises(ValueError, match="replicated tables need a cluster"):
        SchemaOptions(replicated=True)


# --- schema on both backends -----------------------------------------------------------------------


def test_schema_applied_twice_changes_nothing(store_target):
    with Store.open(store_target) as store:
        assert store.schema_version() == LATEST_VERSION
        before = store.query(
            f"SELECT name, engine, create_table_query FROM system.tables "
            f"WHERE database = '{store.database}' ORDER BY name"
        )
        assert store.apply_schema() == []
        after = store.query(
            f"SELECT name, engine, create_table_query FROM system.tables "
            f"WHERE database = '{store.database}' ORDER BY name"
        )
        assert before == after
        assert count(store, "schema_version") == LATEST_VERSION
        names = {r[0] for r in after}
        assert {"rates_raw", *ROLLUPS, "anomalies_latest", "phases", "topology_links"} <= names
    with Store.open(store_target) as again:  # reopening applies nothing either
        assert again.apply_schema() == [] and count(again, "schema_version") == LATEST_VERSION


def test_a_new_store_is_created_at_the_current_version_as_a_migrated_one_is(tmp_path, store_target):
    """A new store is built at the newest version directly (no v1 rollups created only to be
    dropped), and holds the same tables, defined the same way, as a store migrated from v1."""
    migrated_target = str(tmp_path / "migrated") if "://" not in store_target else store_target + "_migrated"

    def tables(store: Store) -> list[tuple]:
        rows = store.query(
            f"SELECT name, engine, create_table_query FROM system.tables WHERE database = '{store.database}'"
        )
        return sorted((n, e, q.replace(f"{store.database}.", "DB.")) for n, e, q in rows)

    with Store.open(store_target, apply_schema=False) as fresh:
        assert fresh.apply_schema() == [m.version for m in MIGRATIONS]
        assert count(fresh, "schema_version") == LATEST_VERSION
        new = tables(fresh)
    if "://" not in store_target:
        dropped = Path(store_target) / "metadata_dropped"
        assert not dropped.exists() or not any(dropped.iterdir())
    with Store.open(migrated_target, apply_schema=False) as migrated:
        migrated.apply_schema(upto=1)
        migrated.apply_schema()
        assert tables(migrated) == new


def test_an_older_schema_is_upgraded_in_place(store_target, fabric_stream):
    """A v1 database holding the first half of a run is upgraded (v2: anomalies_latest, v3: new
    rollup columns); the second half goes in after. Every rollup then equals the raw rows: the
    history was carried over and the new views are attached."""
    half = len(fabric_stream) // 2
    with Store.open(store_target, apply_schema=False) as store:
        assert store.schema_version() == 0
        assert store.apply_schema(upto=1) == [1]
        tables = {r[0] for r in store.query("SHOW TABLES")}
        assert "anomalies_latest" not in tables
        events = [m for m in fabric_stream if isinstance(m, Anomaly)]
        assert events
        v1 = [m for m in fabric_stream[:half] if not isinstance(m, CommGraph)]  # graphs came with v5
        with Sink(store) as sink:
            feed(sink, [*v1, *(m for m in fabric_stream[half:] if isinstance(m, Anomaly))])
        assert store.apply_schema() == [2, 3, 4, 5, 6, 7, 8, 9]
        assert store.schema_version() == 9
        # the new table was backfilled from the events stored before the upgrade
        latest = store.query("SELECT fingerprint, status FROM anomalies_latest FINAL ORDER BY fingerprint")
        assert len(latest) == len({a.fingerprint for a in events})
        with Sink(store) as sink:
            feed(sink, [m for m in fabric_stream[half:] if isinstance(m, PortRates)])
            # v6: an incident's cause, through the view made again into anomalies_latest
            feed(sink, [msgspec.structs.replace(events[-1], fingerprint="caused", caused_by="cause-fp")])
        (caused,) = store.query("SELECT caused_by FROM anomalies_latest FINAL WHERE fingerprint = 'caused'")
        assert caused == ("cause-fp",)
        assert count(store, "rates_raw") == rate_rows(fabric_stream)
        for table in ROLLUPS:
            assert_same_rollup(rollup(store, table), rollup_from_raw(store, table), table)
        leftovers = (
            {r[0] for r in store.query("SHOW TABLES")}
            - tables
            - {
                "anomalies_latest",
                "anomalies_latest_mv",
                "comm_edges",
                "comm_ranks",
                "collective_calls",
                "job_steps",
                "nic_periods",
                "burst_profiles",
            }
        )
        assert leftovers == set()
        with pytest.raises(ValueError, match="newer than 1"):
            store.apply_schema(upto=1)


# --- sink on both backends -----------------------------------------------------------------------


def test_rates_and_rollups_agree(store_target, fabric_stream):
    rows = rate_rows(fabric_stream)
    with Store.open(store_target) as store:
        with Sink(store, max_rows=2000) as sink:
            feed(sink, fabric_stream)
        assert sink.stats.flushes > 1  # batched by rows, not one insert
        assert count(store, "rates_raw") == sink.stats.rate_rows == rows
        for table in ROLLUPS:
            merged = store.query(f"SELECT sum(samples) FROM {table}")[0][0]
            assert merged == rows, table
            assert_same_rollup(rollup(store, table), rollup_from_raw(store, table), table)
        # a rollup's average is the raw rows' average (NULLs skipped) for every port
        raw = dict(
            ((d, p), v)
            for d, p, v in store.query(
                "SELECT device, port, avg(tx_bps) FROM rates_raw GROUP BY device, port"
            )
        )
        hourly = store.query(
            "SELECT device, port, sum(tx_bps_sum) / sum(tx_bps_n) FROM rates_1h GROUP BY device, port"
        )
        assert len(hourly) == len(raw)
        for d, p, v in hourly:
            assert v == pytest.approx(raw[(d, p)], rel=1e-9)
        # unknown is NULL, not 0: NICs have no switch queues
        nulls = store.query(
            "SELECT count() FROM rates_raw WHERE device_kind = 'nic' AND queue_bytes_max IS NULL"
        )
        nics = store.query("SELECT count() FROM rates_raw WHERE device_kind = 'nic'")
        assert nulls == nics and nics[0][0] > 0
        last = store.query("SELECT device, max(ts_ns) FROM device_latest GROUP BY device ORDER BY device")
        expect = {}
        for m in fabric_stream:
            if isinstance(m, PortRates):
                expect[m.device] = max(expect.get(m.device, 0), m.ts_ns)
        assert dict(last) == expect


def test_redelivery_after_a_crash_does_not_double_count(store_target, fabric_stream):
    """Run A is uninterrupted. Run B's first sink inserts batches, then "crashes": its last batch
    was inserted but never committed, and what it buffered since is lost. A new sink starts from
    the last committed position, so that batch is delivered again. The rollups must match A's."""
    (target_a, db_a), (target_b, db_b) = _two_databases(store_target)
    with Store.open(target_a, db_a) as a:
        with Sink(a, max_rows=700) as sink:
            feed(sink, fabric_stream)
        expected = {t: rollup(a, t) for t in ROLLUPS}
        expected_raw = count(a, "rates_raw")
    with Store.open(target_b, db_b) as b:
        first = Sink(b, max_rows=700)
        committed, inserted_at = 0, []
        crash_at = len(fabric_stream) * 2 // 3
        for i, m in enumerate(fabric_stream[:crash_at]):
            feed(first, [m])
            if first.pending_rows == 0:
                inserted_at.append(i + 1)
        assert len(inserted_at) >= 2 and first.pending_rows > 0
        committed = inserted_at[-2]  # the last batch's offsets were never committed
        second = Sink(Store(b.backend, b.options), max_rows=700)  # a new process: nothing in memory
        feed(second, fabric_stream[committed:])
        second.close()
        assert second.stats.rate_rows_skipped > 0  # the redelivered batch came and was skipped
        assert count(b, "rates_raw") == expected_raw
        for t in ROLLUPS:
            assert_same_rollup(rollup(b, t), expected[t], t)
        assert count(b, "anomaly_events") == sum(isinstance(m, Anomaly) for m in fabric_stream)


def test_rates_in_batches_store_what_single_messages_store(store_target, fabric_stream):
    """A stage-1 worker sends a batch's rates as ``RatesBatch`` messages; the stored rows must be
    those of the same rates one message per device (what earlier builds and the recorder send)."""
    rates = [m for m in fabric_stream if isinstance(m, PortRates)]
    batches = [_as_batch(rates[i : i + 37]) for i in range(0, len(rates), 37)]
    (target_a, db_a), (target_b, db_b) = _two_databases(store_target)
    query = (
        "SELECT device, device_kind, port, ts_ns, dt_s, tx_bps, rx_util, tx_pause_frac, ecn_marked_pps, "
        "queue_bytes_max FROM rates_raw ORDER BY device, port, ts_ns"
    )
    with Store.open(target_a, db_a) as a:
        with Sink(a, max_rows=700) as sink:
            feed(sink, rates)
        single = a.query(query)
    with Store.open(target_b, db_b) as b:
        with Sink(b, max_rows=700) as sink:
            feed(sink, [decode(encode(m), RatesBatch) for m in batches])
        batched = b.query(query)
    assert len(batched) == sum(len(m.ports) for m in rates) and _same_rows(batched, single)


def _as_batch(msgs: list[PortRates]) -> RatesBatch:
    return RatesBatch(
        [m.device for m in msgs],
        [m.device_kind for m in msgs],
        [m.ts_ns for m in msgs],
        [m.dt_s for m in msgs],
        [len(m.ports) for m in msgs],
        [p for m in msgs for p in m.ports],
        list(PORT_RATE_COLUMNS),
        np.concatenate([m.matrix() for m in msgs]).astype("<f8").tobytes(),
    )


def _same_rows(got: list[tuple], want: list[tuple]) -> bool:
    """Row for row, NULL (unknown) and NaN compared as themselves."""
    return [tuple(repr(v) for v in r) for r in got] == [tuple(repr(v) for v in r) for r in want]


def _two_databases(target: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """Two stores to compare: two databases (chdb: one directory per process, two databases in it)."""
    if target.startswith("clickhouse://"):
        return (target + "_a", ""), (target + "_b", "")
    return (target, "run_a"), (target, "run_b")


def test_anomaly_lifecycle_latest_state_is_one_query(store_target):
    def event(fp: str, status: str, ts_s: int) -> Anomaly:
        return Anomaly(
            fingerprint=fp,
            kind="pfc_storm",
            severity="critical",
            status=status,  # type: ignore[arg-type]
            start_ns=1_700_000_000 * 10**9,
            ts_ns=(1_700_000_000 + ts_s) * 10**9,
            root=RootCause("leaf0", "Ethernet4", 3),
            summary=f"{fp} {status}",
            end_ns=(1_700_000_000 + ts_s) * 10**9 if status == "resolved" else None,
            devices=["leaf0", "spine1"],
            evidence={"paused_fraction": 0.999, "port": "Ethernet4"},
        )

    x = [event("x", "firing", 0), event("x", "updated", 5), event("x", "resolved", 9)]
    y = [event("y", "firing", 3)]
    with Store.open(store_target) as store:
        with Sink(store) as sink:
            feed(sink, [*x, *y, x[1]])  # x's update delivered twice
        with Sink(store) as again:  # and the whole stream redelivered later
            feed(again, [*x, *y])
        assert again.stats.duplicates_skipped == 4
        assert count(store, "anomaly_events") == 4
        latest = store.query(
            "SELECT fingerprint, status, root_priority, end IS NULL, devices, evidence "
            "FROM anomalies_latest FINAL ORDER BY fingerprint"
        )
        assert [r[:4] for r in latest] == [("x", "resolved", 3, 0), ("y", "firing", 3, 1)]
        assert latest[0][4] == ["leaf0", "spine1"]
        assert '"paused_fraction": 0.999' in latest[0][5]


def test_phases_and_topology(store_target, fabric_stream):
    topo = next(m for m in fabric_stream if isinstance(m, Topology))
    running = Phase(job="j1", comm="c1", op="AllToAll", begin_ns=10**18, hosts=["h1", "h2"])
    done = Phase(job="j1", comm="c1", op="AllToAll", begin_ns=10**18, hosts=["h1", "h2"], end_ns=10**18 + 5)
    with Store.open(store_target) as store:
        with Sink(store) as sink:
            feed(sink, [topo, running, done, topo])
        assert sink.stats.topologies == 1 and sink.stats.duplicates_skipped == 1
        members = sum(len(g.members) for g in topo.ecmp_groups)
        assert count(store, "topology_ecmp") == members > 0
        assert count(store, "topology_links") == len(topo.links)
        assert count(store, "topology_devices") == len(topo.devices)
        phase = store.query("SELECT job, op, end_ns, hosts FROM phases FINAL")
        assert phase == [("j1", "AllToAll", 10**18 + 5, ["h1", "h2"])]


def test_timed_collective_calls_are_stored_with_the_bandwidths_the_inspector_computed(store_target):
    """The NCCL Inspector README's two records (an AllReduce and a ReduceScatter over 8 ranks) as
    timed calls, sent twice (a re-read after a restart): stored once each, with the algorithm and
    bus bandwidth the Inspector itself printed for them."""
    records = inspector_examples()
    batches = inspector_example_calls("llm-a", 1_748_030_377_000_000_000)
    with Store.open(store_target) as store:
        with Sink(store) as sink:
            feed(sink, batches + batches)
        rows = store.query(
            "SELECT DISTINCT op, rank, host, bytes, size_bucket, algbw, busbw FROM collective_calls "
            "ORDER BY op"
        )
    assert [r[:5] for r in rows] == [
        ("AllReduce", 2, "example-hostname", 17179869184, 1 << 34),
        ("ReduceScatter", 4, "example-hostname", 2147483648, 1 << 31),
    ]
    for row, rec in zip(rows, records, strict=True):
        assert row[5] == pytest.approx(rec["coll_perf"]["coll_algobw_gbs"], abs=1e-6)
        assert row[6] == pytest.approx(rec["coll_perf"]["coll_busbw_gbs"], abs=1e-6)


def test_a_jobs_steps_are_stored_once_with_unknown_shares_left_unknown(store_target):
    """Steps of two ranks, one from a profiler that timed the kernels (its time in collectives)
    and one from the API's marks (time only), sent twice: stored once each; the API's step has
    NULL time in collectives, so a share over it is unknown, not 0 %."""
    t0 = 1_748_030_377_000_000_000
    steps = Steps(
        job="llm-a",
        ts_ns=t0,
        steps=[Step(4, 0, t0, 222_442_191, 11_989_021, 11_989_021), Step(4, 1, t0 + 5_000, 220_000_000)],
        rank_hosts={0: "gpu0", 1: "gpu1"},
        source="kineto",
    )
    with Store.open(store_target) as store:
        with Sink(store) as sink:
            feed(sink, [steps, steps])
        rows = store.query(
            "SELECT rank, host, step, dur_ns, coll_ns, exposed_ns, coll_ns / dur_ns FROM job_steps FINAL "
            "ORDER BY rank"
        )
    assert [r[:6] for r in rows] == [
        (0, "gpu0", 4, 222_442_191, 11_989_021, 11_989_021),
        (1, "gpu1", 4, 220_000_000, None, None),
    ]
    assert rows[0][6] == pytest.approx(0.0539, abs=1e-4) and rows[1][6] is None


def test_communication_graphs_give_each_job_s_host_pairs(store_target):
    """The real nccl-tests#350 job's graphs (one host's sent twice, as after a restart) are stored
    and joined into host pairs, each connection once, on chdb and on the old server alike; the
    report's other job queries run on both too."""
    with Store.open(store_target) as store:
        with Sink(store) as sink:
            feed(sink, stored_gather(10**18))
        assert sink.stats.graph_edges == 6 + 2 * 2, "stored as they come: the tables merge repeats"
        assert host_pairs(store, "gather") == {("n013", "n014"): 2, ("n014", "n013"): 4}
        assert host_pairs(store, "other") == {}
        assert jobs_in_range(store, 10**18, 10**18 + 10**10, 4) == ["gather"]
        (phase,) = job_phases(store, "gather", 10**18, 10**18 + 10**10)
        assert (phase.op, phase.hosts) == ("AllGather", ("n013", "n014"))


def test_a_store_refuses_bad_targets_clearly(tmp_path):
    with pytest.raises(ValueError, match="a directory or a clickhouse:// URL"):
        Store.open("http://localhost:8123/")
    with pytest.raises(ValueError, match="expected clickhouse://"):
        ServerAddress.parse("clickhouse://")
    assert "hunter2" not in repr(ServerAddress.parse("clickhouse://fw:hunter2@db:9000/x"))
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:\d+/fabricwatch: cannot connect"):
        Store.open(f"clickhouse://127.0.0.1:{free_port()}/fabricwatch")
    with Store.open(tmp_path / "one"), pytest.raises(StoreError, match="one data directory per process"):
        Store.open(tmp_path / "two")


def test_sink_batches_by_rows_and_by_age(tmp_path, fabric_stream):
    now = [0.0]
    rates = [m for m in fabric_stream if isinstance(m, PortRates)]
    with Store.open(tmp_path / "s") as store:
        sink = Sink(store, max_rows=1000, max_delay_s=5.0, clock=lambda: now[0])
        assert not sink.due()
        sink.add_rates(rates[0])
        assert not sink.due()
        now[0] = 4.9
        assert not sink.maybe_flush()
        now[0] = 5.0
        assert sink.maybe_flush() and sink.pending_rows == 0
        i = 1
        while sink.pending_rows < 1000:
            assert not sink.due()
            sink.add_rates(rates[i])
            i += 1
        assert sink.due()
        with pytest.raises(ValueError):
            Sink(store, max_rows=0)


def test_unknown_and_missing_columns_from_another_build(tmp_path):
    msg = PortRates(
        "d1", "nic", 10**18, 1.0, ["p1"], ["rx_bps", "future_metric", "tx_bps"], [[1.0, 2.0, 3.0]]
    )
    with Store.open(tmp_path / "s") as store:
        with Sink(store) as sink:
            sink.add_rates(msg)
        assert store.query("SELECT tx_bps, rx_bps, tx_pps FROM rates_raw") == [(3.0, 1.0, None)]


def test_demo_stores_into_the_default_data_dir(tmp_path, monkeypatch, capsys):
    from fabricwatch.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--quiet"]) == 0
    out = capsys.readouterr().out
    where = tmp_path / "fabricwatch-data"
    assert f"in chdb:{where}" in out
    stored = int(re.search(r"stored (\d+) rate rows", out).group(1))
    with Store.open(where) as store:
        assert count(store, "rates_raw") == stored > 0
        assert count(store, "anomaly_events") > 0 and count(store, "topology_links") > 0
    assert main(["demo", "--quiet"]) == 0  # the same demo again: nothing stored twice
    assert f"stored 0 rate rows ({stored} were already stored)" in capsys.readouterr().out


@pytest.mark.skipif(server_binary() is None, reason="clickhouse-server is not installed")
def test_sink_keeps_its_batch_while_the_server_is_down(tmp_path, fabric_stream):
    rates = [m for m in fabric_stream if isinstance(m, PortRates)][:200]
    server = LocalClickHouse(tmp_path / "server").start()
    try:
        store = Store.open(server.url())
        sink = Sink(store)
        for m in rates[:100]:
            sink.add_rates(m)
        server.stop(kill=True)  # it crashes
        with pytest.raises(StoreError, match=r"insert|connect|Connection|refused"):
            sink.flush()
        assert sink.stats.failures == 1 and sink.pending_rows == rate_rows(rates[:100])
        server.start()
        for m in rates[100:]:
            sink.add_rates(m)
        sink.flush()
        assert count(store, "rates_raw") == rate_rows(rates)
        store.close()
    finally:
        server.stop()


def test_server_backend_reports_its_dialect(clickhouse_url):
    with Store.open(clickhouse_url) as store:
        assert store.backend.dialect.version == (18, 16) or store.backend.dialect.modern
        create = store.query("SHOW CREATE TABLE rates_raw")[0][0]
        if not store.backend.dialect.modern:
            assert "TTL" not in create and "LowCardinality" not in create


def test_chdb_store_persists_in_its_directory(tmp_path, fabric_stream):
    rates = [m for m in fabric_stream if isinstance(m, PortRates)][:50]
    with Store.open(tmp_path / "d") as store, Sink(store) as sink:
        feed(sink, rates)
    assert Path(tmp_path / "d").is_dir()
    with Store.open(tmp_path / "d") as reopened:
        assert count(reopened, "rates_raw") == rate_rows(rates)
        assert np.isfinite(reopened.query("SELECT max(tx_bps) FROM rates_raw")[0][0])


def test_a_database_newer_than_this_build_is_refused(tmp_path):
    with Store.open(tmp_path / "s") as store:
        store.execute(
            "INSERT INTO schema_version (version, applied, description) VALUES (99, now(), 'from the future')"
        )
    with pytest.raises(StoreError, match="schema version 99, newer than this build's"):
        Store.open(tmp_path / "s")
    with Store.open(tmp_path / "s", apply_schema=False) as store:  # reading it is still possible
        assert store.schema_version() == 99 and count(store, "rates_raw") == 0


def periods_of(stream: list, job: str = "llm-a") -> Periods:
    """What a stage-1 worker would publish had ``job``'s NICs repeated every 6 s (the stream's
    30 s are shorter than the rhythm detector's window)."""
    hosts = {h for m in stream if isinstance(m, Phase) and m.job == job for h in m.hosts}
    topology = next(m for m in stream if isinstance(m, Topology))
    nics = [n.nic for n in topology.nics if n.host in hosts]
    at = max(m.ts_ns for m in stream if isinstance(m, PortRates))
    n = len(nics)
    return Periods(nics, [at] * n, [6.0] * n, [0.8] * n, [6.0] * n, [1e9] * n)


def test_the_documented_queries_run_on_both_backends(store_target, fabric_stream):
    doc = (DOCS / "storage.md").read_text(encoding="utf-8")
    queries = re.findall(r"```sql\n(.*?)```", doc, re.DOTALL)
    assert len(queries) >= 3
    with Store.open(store_target) as store:
        with Sink(store) as sink:
            # the demo has no NCCL INIT lines, nor timed calls, nor steps
            jobs = [*stored_gather(10**18), *inspector_example_calls("llm-a", 10**18)]
            feed(
                sink,
                [*fabric_stream, *jobs, kineto_example_steps("llm-a", 10**18), periods_of(fabric_stream)],
            )
        device = next(
            m.device for m in fabric_stream if isinstance(m, PortRates) and m.device_kind == "switch"
        )
        end_s = max(m.ts_ns for m in fabric_stream if isinstance(m, PortRates)) // 10**9 + 1
        now = f"toDateTime({end_s}, 'UTC')"  # the stream's clock, not the wall clock
        results = [store.query(q.replace("'leaf-0'", f"'{device}'").replace("now()", now)) for q in queries]
    assert all(results), "every documented query finds the stored demo data"
