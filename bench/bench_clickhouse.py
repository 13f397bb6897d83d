"""Insert throughput of per-port rates into ClickHouse: our Sink beside a direct bulk insert.

For each backend (chdb in process; a real ``clickhouse-server`` started here when installed) and
each layout (``LAYOUTS``: the current schema, schema v2 as the baseline, the raw table alone), the
same rows go in two ways into a fresh database:

* ``sink``: PortRates messages as Kafka records' bytes, decoded, through ``Sink.add_rates`` and
  ``flush`` every ``--batch`` rows: everything the ``fabricwatch sink`` loop does except Kafka.
* ``direct``: the same rows already as columns, one insert per batch straight into the backend.

Both ways store the metrics the layout's table has (``metrics``), as the sink does: v2 has only
those of its time (schema v4 added more), so against v2 the current schema also inserts more columns.

``sink_vs_direct`` is what our batching and conversion cost; ``v3_*_vs_this`` what the current
schema gains over a layout, measured in the same process. A separate line compares ways to hand
chdb a batch (Arrow through ``Python()``, a pandas DataFrame, a Parquet file), which picked Arrow;
another what decoding a record costs with either encoding of ``PortRates.values``.

Run: ``python bench/bench_clickhouse.py [--rows N] [--batch 200000] [--repeats 3]
[--layouts v3,v2,raw] [--backends chdb,server] [--values demo|random]``.
Prints one JSON object per measurement.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.summary import summarise
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.clickhouse_server import LocalClickHouse, server_binary
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import PORT_RATE_COLUMNS, PortRates, decode, encode
from fabricwatch.storage.schema import ROLLUPS
from fabricwatch.storage.sink import Sink
from fabricwatch.storage.store import Store

PORTS = 64
T0_NS = (time.time_ns() - 3600 * 10**9) // 10**9 * 10**9


def demo_values(seconds: int = 60) -> np.ndarray:
    """Every port rate stage 1 publishes for ``seconds`` of the demo fabric (rows × metrics, NaN
    where unknown): idle ports, pause and ECN counters that are mostly 0, no queues on NICs."""
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "demo.yaml"
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        trace = Path(tmp) / "demo.trace.gz"
        simulate(load_scenario(scenario, {"duration": seconds}), trace)
        rates: list[np.ndarray] = []
        pipeline = Pipeline()
        pipeline.on_frame = lambda f: rates.append(
            summarise(f, pipeline.stage1.fabric.port_speeds_bps(f.device, f.ports))
        )
        replay_trace(trace, pipeline, lambda _: None)
    return np.concatenate([r.matrix() for r in rates])


def messages(rows: int, mix: np.ndarray | None = None, seed: int = 1) -> list[PortRates]:
    """Snapshots of 64 ports, one per device per second. Each port's values are a row drawn from
    ``mix`` (``demo_values()``); without it, uniform random values in every metric with 5%
    unknown: incompressible, the worst case for ClickHouse."""
    rng = np.random.default_rng(seed)
    devices = 200
    out = []
    ports = [f"Ethernet{i * 4}" for i in range(PORTS)]
    shape = (PORTS, len(PORT_RATE_COLUMNS))
    for i in range(rows // PORTS):
        if mix is None:
            values = rng.random(shape) * 1e9
            values[rng.random(values.shape) < 0.05] = np.nan
        else:
            values = mix[rng.integers(0, len(mix), size=PORTS)]
        device, ts_ns = f"leaf{i % devices:03d}", T0_NS + (i // devices) * 10**9
        out.append(PortRates.of(device, "switch", ts_ns, 1.0, ports, list(PORT_RATE_COLUMNS), values))
    return out


def as_rows_of_numbers(msg: PortRates) -> PortRates:
    """The same message as earlier builds sent it: rows of JSON numbers (a NaN is written as null)."""
    rows = msg.matrix().tolist()
    return PortRates(msg.device, msg.device_kind, msg.ts_ns, msg.dt_s, msg.ports, msg.columns, rows)


def wire_formats(msgs: list[PortRates]) -> None:
    """What a sink pays per row to turn a Kafka record into a numpy matrix, for both encodings of
    ``PortRates.values``, in the same process."""
    out: dict[str, Any] = {"bench": "rates_decode", "rows": len(msgs) * PORTS}
    for label, wire in (
        ("bytes", [encode(m) for m in msgs]),
        ("rows_of_numbers", [encode(as_rows_of_numbers(m)) for m in msgs]),
    ):
        started = time.perf_counter()
        for data in wire:
            decode(data, PortRates).matrix()
        out[f"{label}_rows_per_s"] = round(len(msgs) * PORTS / (time.perf_counter() - started))
        out[f"{label}_bytes_per_row"] = round(sum(map(len, wire)) / (len(msgs) * PORTS), 1)
    out["bytes_vs_rows_of_numbers"] = round(out["bytes_rows_per_s"] / out["rows_of_numbers_rows_per_s"], 1)
    print(json.dumps(out), flush=True)


def as_columns(msgs: list[PortRates], metrics: tuple[str, ...] = PORT_RATE_COLUMNS) -> dict[str, Any]:
    """The rows of ``msgs`` as insert columns, with only ``metrics`` of ``PORT_RATE_COLUMNS``."""
    n = len(msgs) * PORTS
    ts = np.repeat(np.array([m.ts_ns for m in msgs], dtype=np.uint64), PORTS)
    values = np.concatenate([m.matrix() for m in msgs])
    cols: dict[str, Any] = {
        "ts": ts.astype("datetime64[ns]"),
        "ts_ns": ts,
        "device": np.repeat(np.array([m.device for m in msgs], dtype=object), PORTS),
        "device_kind": np.full(n, "switch", dtype=object),
        "port": np.array([p for m in msgs for p in m.ports], dtype=object),
        "dt_s": np.ones(n, dtype=np.float32),
    }
    for name in metrics:
        cols[name] = np.ascontiguousarray(values[:, PORT_RATE_COLUMNS.index(name)])
    return cols


def through_sink(store: Store, msgs: list[PortRates], batch: int) -> float:
    """From the Kafka records' bytes: decoded, buffered, inserted."""
    wire = [encode(m) for m in msgs]
    started = time.perf_counter()
    sink = Sink(store, max_rows=batch, max_delay_s=3600)
    for data in wire:
        sink.add_rates(decode(data, PortRates))
        if sink.pending_rows >= batch:
            sink.flush()
    sink.flush()
    return time.perf_counter() - started


def direct(store: Store, msgs: list[PortRates], batch: int) -> float:
    """Already as columns, one insert per batch, of the metrics the table has here as the sink does
    (an older layout has fewer, and an insert naming a column it lacks fails)."""
    per = max(1, batch // PORTS)
    metrics = store.rate_metrics()
    chunks = [as_columns(msgs[i : i + per], metrics) for i in range(0, len(msgs), per)]
    started = time.perf_counter()
    for cols in chunks:
        store.backend.insert(store.table("rates_raw"), cols)
    return time.perf_counter() - started


LAYOUTS = {
    "v3": "the current schema: raw rows, three rollup views, device_latest",
    "v2": "schema v2 (before the rollups became plain columns): avg/max states, cascaded views",
    "raw": "the current schema with every view dropped: what the raw table alone takes",
}


def run_backend(
    name: str, open_store: Any, msgs: list[PortRates], batch: int, layouts: list[str], repeats: int
) -> None:
    """``open_store(database)`` opens a fresh database on the backend, without a schema; each
    layout (``LAYOUTS``) is built in it.

    Layouts, and direct and sink runs, alternate ``repeats`` times and the best of each is kept:
    this machine is shared, and a burst of someone else's work would otherwise decide a ratio.
    Each database is dropped after its run so that its background merges do not slow the next."""
    rows = len(msgs) * PORTS
    best = {(layout, how): 0.0 for layout in layouts for how in ("direct", "sink")}
    metrics: dict[str, int] = {}
    for rep in range(repeats):
        for layout in layouts:
            for how, fn in (("direct", direct), ("sink", through_sink)):
                db = f"bench_{how}_{layout}_{rep}"
                with open_store(db) as store:
                    store.apply_schema(upto=2 if layout == "v2" else None)
                    if layout == "raw":
                        for view in [*(f"{name}_mv" for name in ROLLUPS), "device_latest_mv"]:
                            store.execute(f"DROP TABLE {store.table(view)}")
                    metrics[layout] = len(store.rate_metrics())
                    seconds = fn(store, msgs, batch)
                    stored = store.query("SELECT count() FROM rates_raw")[0][0]
                    assert stored == rows, (how, stored, rows)
                    if layout != "raw":
                        samples = "countMerge(samples)" if layout == "v2" else "sum(samples)"
                        rolled = store.query(f"SELECT {samples} FROM rates_1h")[0][0]
                        assert rolled == rows, (how, rolled, rows)
                    store.execute(f"DROP DATABASE {db}")
                best[layout, how] = max(best[layout, how], rows / seconds)
    for layout in layouts:
        direct_rate, sink_rate = best[layout, "direct"], best[layout, "sink"]
        result = {
            "bench": "insert",
            "backend": name,
            "layout": layout,
            "rows": rows,
            "metrics": metrics[layout],
            "batch_rows": batch,
            "repeats": repeats,
            "direct_rows_per_s": round(direct_rate),
            "sink_rows_per_s": round(sink_rate),
            "sink_vs_direct": round(sink_rate / direct_rate, 2),
        }
        if layout != "v3" and "v3" in layouts:
            result["v3_direct_vs_this"] = round(best["v3", "direct"] / direct_rate, 2)
            result["v3_sink_vs_this"] = round(best["v3", "sink"] / sink_rate, 2)
        print(json.dumps(result), flush=True)


def chdb_formats(target: str, msgs: list[PortRates], tmp: Path) -> None:
    """Ways to hand chdb one batch (no rollup views here: the hand-over alone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = as_columns(msgs)
    rows = len(cols["ts_ns"])
    with Store.open(target, "bench_formats", apply_schema=False) as store:
        session = store.backend._session  # the same session the backend inserts through
        session.query("CREATE DATABASE IF NOT EXISTS bench_formats")
        ddl = ", ".join(
            ["ts DateTime64(3, 'UTC')", "ts_ns UInt64", "device LowCardinality(String)"]
            + ["device_kind LowCardinality(String)", "port LowCardinality(String)", "dt_s Float32"]
            + [f"{m} Nullable(Float64)" for m in PORT_RATE_COLUMNS]
        )
        names = ", ".join(cols)
        arrow = pa.table(
            {
                k: pa.array(v, mask=np.isnan(v)) if v.dtype.kind == "f" else pa.array(v)
                for k, v in cols.items()
            }
        )
        parquet = tmp / "batch.parquet"
        out: dict[str, Any] = {"bench": "chdb_handover", "rows": rows}

        def timed(label: str, source: str, batch: Any) -> None:
            """``batch`` is read by name by chdb's ``Python()`` table function."""
            session.query("DROP TABLE IF EXISTS bench_formats.t")
            session.query(
                f"CREATE TABLE bench_formats.t ({ddl}) ENGINE = MergeTree ORDER BY (device, port, ts)"
            )
            started = time.perf_counter()
            if label == "parquet_file":
                pq.write_table(batch, parquet)
            session.query(f"INSERT INTO bench_formats.t ({names}) SELECT {names} FROM {source}")
            out[f"{label}_rows_per_s"] = round(rows / (time.perf_counter() - started))

        timed("arrow_python", "Python(batch)", arrow)
        timed("pandas_python", "Python(batch)", arrow.to_pandas())
        timed("parquet_file", f"file('{parquet}', Parquet)", arrow)
        print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=200_000, help="rows per insert (the sink's max_rows)")
    parser.add_argument("--layouts", default="v3,v2,raw", help=f"comma-separated, of: {', '.join(LAYOUTS)}")
    parser.add_argument("--backends", default="chdb,server", help="comma-separated, of: chdb, server")
    parser.add_argument("--repeats", type=int, default=3, help="best of N alternating runs")
    parser.add_argument(
        "--values",
        choices=["demo", "random"],
        default="demo",
        help="each metric's values as in the demo's rates (default), or uniform random in every metric",
    )
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    if not set(layouts) <= LAYOUTS.keys():
        parser.error(f"--layouts: of {', '.join(LAYOUTS)}")
    backends = args.backends.split(",")
    msgs = messages(args.rows, demo_values() if args.values == "demo" else None)
    print(json.dumps({"bench": "rows", "values": args.values, "rows": len(msgs) * PORTS}), flush=True)
    wire_formats(msgs[: 200_000 // PORTS])
    with tempfile.TemporaryDirectory(prefix="bench-clickhouse-") as tmp:
        if "chdb" in backends:
            chdb_dir = str(Path(tmp) / "chdb")
            # One store stays open for the whole run, as in a sink process: chdb's engine then
            # starts once, not again (~1 s) in the middle of every timed run.
            with Store.open(chdb_dir, "bench_engine", apply_schema=False):
                chdb_formats(chdb_dir, msgs[: 100_000 // PORTS], Path(tmp))
                chdb_store = partial(Store.open, chdb_dir, apply_schema=False)
                run_backend("chdb", chdb_store, msgs, args.batch, layouts, args.repeats)
        if "server" not in backends:
            return
        if server_binary() is None:
            print(
                json.dumps(
                    {"bench": "insert", "backend": "server", "skipped": "clickhouse-server not installed"}
                )
            )
            return
        with LocalClickHouse(Path(tmp) / "server") as server:
            version = Store.open(server.url("bench_probe"), apply_schema=False)
            print(
                json.dumps(
                    {"bench": "server", "version": ".".join(map(str, version.backend.dialect.version))}
                )
            )
            version.close()
            server_store = lambda db: Store.open(server.url(db), apply_schema=False)  # noqa: E731
            run_backend("server", server_store, msgs, args.batch, layouts, args.repeats)


if __name__ == "__main__":
    main()
