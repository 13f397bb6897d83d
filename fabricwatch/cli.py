"""The ``fabricwatch`` command."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from detectors.config import ConfigError, DetectorConfig, load_config
from fabricwatch import console, run, worker
from fabricwatch.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from schemas import topics
from schemas.clickhouse import ROLLUPS
from schemas.messages import Anomaly, encode
from schemas.trace import TraceFormatError, TraceWriter
from streams.clickhouse_backend import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    from alerts.commands import ReplayAlerts
    from detectors.outliers import OutlierDetector
    from streams.clickhouse_recorder import PipelineRecorder
    from streams.kafka_io import BrokerSettings


def default_scenario() -> Path:
    return Path(str(resources.files("fabricwatch").joinpath("scenarios", "demo.yaml")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fabricwatch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="simulate a fabric scenario into a trace file")
    sim.add_argument("--scenario", type=Path, default=None, help="scenario YAML (default: the demo)")
    sim.add_argument("--out", type=Path, required=True, help="trace file to write (.gz to compress)")
    sim.add_argument("--seed", type=int, default=None, help="override the scenario's seed")

    rep = sub.add_parser("replay", help="replay a trace through the detection pipeline in process")
    rep.add_argument("trace", type=Path)
    _detection_options(rep)
    _store_options(rep, None)
    rep.add_argument("--alerts", type=Path, default=None, help="YAML with an alerts: section: deliver alerts")
    rep.add_argument("--broker", default=None, help="publish the trace to this Kafka (HOST:PORT) instead")
    rep.add_argument(
        "--speed", type=float, default=0.0, help="with --broker: 1 = original pace, N = N x faster, 0 = max"
    )
    rep.add_argument(
        "--broker-config", type=Path, default=None, help="YAML with a broker: section (SASL/TLS)"
    )

    rec = sub.add_parser("record", help="record broker topics into a trace file")
    rec.add_argument("--broker", default=None, help="Kafka bootstrap HOST:PORT (or FABRICWATCH_BROKER)")
    rec.add_argument(
        "--broker-config", type=Path, default=None, help="YAML with a broker: section (SASL/TLS)"
    )
    rec.add_argument("--out", type=Path, required=True, help="trace file to write (.gz to compress)")
    rec.add_argument(
        "--topic", action="append", default=None, help="topic to record (repeatable; default all)"
    )
    rec.add_argument(
        "--idle", type=float, default=10.0, help="stop after this many seconds without a message"
    )
    rec.add_argument("--max-records", type=int, default=None)

    demo = sub.add_parser("demo", help="simulate the demo scenario and replay it (no broker, no server)")
    demo.add_argument("--scenario", type=Path, default=None)
    demo.add_argument("--seed", type=int, default=None)
    _detection_options(demo)
    _store_options(demo, Path("fabricwatch-data"), can_skip=True)

    col = sub.add_parser("collect", help="poll this host's RDMA NICs into a trace file")
    col.add_argument("--out", type=Path, required=True, help="trace file to write (.gz to compress)")
    col.add_argument("--interval", type=float, default=1.0, help="seconds between polls (0.1 to 10)")
    col.add_argument("--count", type=int, default=None, help="stop after this many polls (default: Ctrl-C)")
    col.add_argument("--device", action="append", default=None, help="RDMA device (repeatable; default all)")
    col.add_argument("--sysfs-root", type=Path, default=Path("/sys"))
    col.add_argument("--host", default=None, help="host name in device ids (default: this host's)")
    col.add_argument("--no-ethtool", action="store_true", help="sysfs counters only (no PFC counters)")

    tr = sub.add_parser("train", help="fit the learned outlier model on baseline (healthy) traces")
    tr.add_argument("traces", type=Path, nargs="+", metavar="TRACE")
    tr.add_argument("--out", type=Path, required=True, help="model file to write")
    tr.add_argument("--minutes", type=float, default=None, help="only the first M minutes of each trace")
    tr.add_argument("--config", type=Path, default=None, help="YAML with a detectors: section")

    ev = sub.add_parser("evaluate", help="score the detectors on labelled scenarios")
    ev.add_argument("scenarios", type=Path, nargs="+", metavar="SCENARIO_OR_DIR", help="a dir: its *.yaml")
    ev.add_argument("--config", type=Path, default=None, help="YAML with a detectors: section")
    ev.add_argument("--model", type=Path, default=None, help="also run (and score) the learned outlier model")
    ev.add_argument("--seed", type=int, default=None, help="override every scenario's seed")
    ev.add_argument("--json", action="store_true", help="print the report as one JSON document")
    ev.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)")

    worker.add_parser(sub)
    run.add_parser(sub)

    snk = sub.add_parser(
        "sink", help="store fabric.rates/anomalies/phases/topology from Kafka into ClickHouse"
    )
    snk.add_argument("--broker", default=None, help="Kafka bootstrap HOST:PORT (or FABRICWATCH_BROKER)")
    snk.add_argument(
        "--broker-config", type=Path, default=None, help="YAML with a broker: section (SASL/TLS)"
    )
    _store_options(snk, Path("fabricwatch-data"))
    snk.add_argument("--group-id", default="fabricwatch-sink", help="consumer group (offsets live there)")
    snk.add_argument(
        "--rebalance-timeout",
        type=float,
        default=60.0,
        help="seconds: consumer-group rebalance and max poll interval (session timeout at most 10 s)",
    )
    snk.add_argument("--max-rows", type=int, default=200_000, help="insert when this many rows are buffered")
    snk.add_argument(
        "--max-delay", type=float, default=5.0, help="... or when the oldest waited this long (s)"
    )
    snk.add_argument(
        "--idle-exit", type=float, default=None, help="stop after this many seconds without a record"
    )

    gp = sub.add_parser("grafana", help="push fabricwatch's dashboards and anomalies to Grafana")
    gsub = gp.add_subparsers(dest="grafana_command", required=True)
    gpush = gsub.add_parser("push", help="create or update folder, datasource, dashboards, annotations")
    gpush.add_argument("--url", required=True, help="Grafana base URL, e.g. http://grafana:3000")
    gpush.add_argument(
        "--token-file", type=Path, default=None, help="service-account token (or FABRICWATCH_GRAFANA_TOKEN)"
    )
    gpush.add_argument(
        "--user", default=None, help="basic auth instead; password in FABRICWATCH_GRAFANA_PASSWORD"
    )
    gpush.add_argument(
        "--clickhouse-url",
        required=True,
        help="ClickHouse as Grafana reaches it: clickhouse://USER@HOST:9000/DB or http(s)://... "
        "(password in FABRICWATCH_CLICKHOUSE_PASSWORD)",
    )
    gpush.add_argument(
        "--anomalies", type=Path, default=None, help="anomaly events to annotate (replay --json)"
    )
    gpush.add_argument(
        "--annotate-dashboard", default=None, help="dashboard uid for annotations (default: org)"
    )
    gpush.add_argument(
        "--from-store",
        default=None,
        help="annotate the incidents of this store (chdb dir or clickhouse:// URL)",
    )
    gpush.add_argument(
        "--since", default=None, help="with --from-store: incidents active since (ISO 8601 or ns)"
    )
    gpush.add_argument("--datasource-uid", default="fabricwatch-clickhouse")
    gpush.add_argument("--folder-uid", default="fabricwatch")

    rp = sub.add_parser("report", help="write PNG charts and an HTML index from the ClickHouse store")
    rp.add_argument("--out", type=Path, required=True, help="directory for the PNGs and index.html")
    rp.add_argument("--data-dir", type=Path, default=Path("fabricwatch-data"), help="the chdb store to read")
    rp.add_argument(
        "--clickhouse", default=None, help="read a server instead: clickhouse://user@host:9000/db"
    )
    rp.add_argument(
        "--start", default=None, help="ISO 8601 (UTC) or ns since the epoch; default: first stored"
    )
    rp.add_argument("--end", default=None, help="ISO 8601 (UTC) or ns since the epoch; default: last stored")
    rp.add_argument("--ports", type=int, default=8, help="how many per-port timelines to draw")
    rp.add_argument(
        "--resolution",
        choices=["rates_raw", *ROLLUPS],
        default=None,
        help="table to draw from (default: the finest with rates in the range)",
    )

    al = sub.add_parser("alert", help="consume fabric.anomalies and deliver alerts to webhooks")
    al.add_argument("--broker", default=None, help="Kafka bootstrap HOST:PORT (or FABRICWATCH_BROKER)")
    al.add_argument("--broker-config", type=Path, default=None, help="YAML with a broker: section (SASL/TLS)")
    al.add_argument("--config", type=Path, required=True, help="YAML with an alerts: section")
    al.add_argument("--group-id", default="fabricwatch-alerts", help="consumer group (offsets live there)")

    sil = sub.add_parser("silence", help="add a silence (label matchers with an expiry) to a silences file")
    sil.add_argument("matchers", nargs="+", metavar="MATCHER", help='e.g. device="leaf-3" kind=~"incast"')
    sil.add_argument("--file", type=Path, required=True, help="the silences_file of the alerts: section")
    sil.add_argument("--for", dest="duration", default="2h", help="how long (e.g. 30m, 2h; default 2h)")
    sil.add_argument("--comment", default="", help="why")
    sil.add_argument("--author", default=os.environ.get("USER", ""), help="who (default: $USER)")

    args = parser.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (ConfigError, TraceFormatError, ValueError, OSError, StoreError) as exc:
        print(f"fabricwatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__module__.startswith("kafka"):  # NoBrokersAvailable and kin: say which broker
            print(
                f"fabricwatch {args.command}: broker {getattr(args, 'broker', '')}: {exc!r}", file=sys.stderr
            )
            return 2
        raise


def _detection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, default=None, help="YAML with a detectors: section")
    p.add_argument("--json", action="store_true", help="print anomaly events as JSON lines instead")
    p.add_argument("--quiet", action="store_true", help="only the summary tables")
    p.add_argument("--model", type=Path, default=None, help="learned outlier model (fabricwatch train)")
    p.add_argument(
        "--train-minutes", type=float, default=None, help="learn outliers from the trace's first M minutes"
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    _simulate(args, sys.stdout)
    return 0


def _simulate(args: argparse.Namespace, out: TextIO) -> None:
    from ingest.simulator import load_scenario, simulate

    scenario = load_scenario(args.scenario or default_scenario())
    stats = simulate(scenario, args.out, seed=args.seed)
    print(
        f"wrote {args.out}: {stats.records} records, {stats.snapshots} snapshots, {stats.values} counter "
        f"values, {stats.simulated_seconds:.0f} simulated s in {stats.wall_seconds:.1f} s",
        file=out,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    if args.broker is None:
        return replay(args.trace, args)
    from fabricwatch.broker_replay import publish_trace

    result = publish_trace(args.trace, _broker_settings(args), args.speed)
    st = result.stats
    print(
        f"published {result.records} records from {args.trace} in {result.wall_s:.1f} s: "
        f"{st.acked} acknowledged, {st.failed} failed, {st.dropped} dropped; "
        f"{result.skipped_labels} labels kept out of the broker"
    )
    if st.last_error:
        print(f"last error: {st.last_error}", file=sys.stderr)
    return 0 if st.failed == st.dropped == 0 else 1


def cmd_record(args: argparse.Namespace) -> int:
    from fabricwatch.broker_replay import record_topics
    from streams.kafka_io import DEFAULT_PARTITIONS

    names = args.topic or list(DEFAULT_PARTITIONS)
    count = record_topics(_broker_settings(args), args.out, names, args.idle, args.max_records)
    print(f"wrote {args.out}: {count} records from {', '.join(names)}")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    return worker.run_worker(_broker_settings(args), args)


def cmd_run(args: argparse.Namespace) -> int:
    settings = _broker_settings(args) if args.broker or os.environ.get("FABRICWATCH_BROKER") else None
    result = run.run_pipeline(settings, args.scenario or default_scenario(), args, sys.stdout)
    if args.json:
        return 0
    print("\nIncidents", file=sys.stdout)
    console.print_incidents(result.anomalies, sys.stdout)
    st = result.published.stats
    print(
        f"\n{result.published.records} records published ({st.failed} failed, {st.dropped} dropped), "
        f"{len(result.anomalies)} anomaly events, {result.wall_s:.1f} s",
        file=sys.stdout,
    )
    if result.stored:
        print(f"stored in {result.stored}; report: {result.report[-1]}", file=sys.stdout)
    return 0


def _broker_settings(args: argparse.Namespace) -> BrokerSettings:
    from streams.kafka_io import load_broker_settings

    settings = load_broker_settings(args.broker_config)
    if args.broker:
        settings = settings.with_bootstrap(args.broker)
    if not settings.bootstrap:
        raise ValueError("no broker: give --broker HOST:PORT or set FABRICWATCH_BROKER")
    return settings


def cmd_demo(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="fabricwatch-demo-") as tmp:
        trace = Path(tmp) / "demo.trace.gz"
        args.out = trace
        _simulate(args, sys.stderr if args.json else sys.stdout)
        return replay(trace, args)


def replay(path: Path, args: argparse.Namespace) -> int:
    out = sys.stdout

    def malformed(line: int, reason: str) -> None:
        print(f"{path}:{line}: skipped malformed record: {reason}", file=sys.stderr)

    def show(events: list[Anomaly]) -> None:
        for a in events:
            if args.json:
                out.write(encode(a).decode() + "\n")
            elif not args.quiet:
                console.print_event(a, out)

    config = load_config(args.config)
    outliers = _outlier_detector(path, args, config)
    alerting = _replay_alerts(args)
    on_events = show if alerting is None else _both(show, alerting.feed)
    pipeline = Pipeline(config, outliers=outliers)
    recorder = _store_recorder(args, pipeline)
    if recorder is not None:
        on_events = _both(on_events, recorder.on_anomalies)
    try:
        result = replay_trace(path, pipeline, on_events, malformed)
        if recorder is not None:
            recorder.finish()
            _print_stored(recorder, sys.stderr if args.json else out)
    finally:
        if recorder is not None:
            recorder.sink.store.close()
    # Exit 1 when an alert was given up or left undelivered, after the usual output.
    alerts_ok = alerting is None or alerting.finish(sys.stderr if args.json else out)
    pipeline = result.pipeline
    for dl in pipeline.dead_letters:
        print(f"{dl.where}: dead letter ({dl.topic}): {dl.reason}", file=sys.stderr)
    if args.json:
        return 0 if alerts_ok else 1
    print("\nIncidents", file=out)
    console.print_incidents(result.anomalies, out)
    if pipeline.labels:
        print("\nScore against the trace's labels", file=out)
        console.print_evaluation(result.evaluation(), out)
    s, wall = pipeline.stats, result.wall_s
    print(
        f"\n{s.records} records, {s.snapshots} snapshots, {s.values} counter values in {wall:.2f} s "
        f"({s.values / wall if wall else 0:,.0f} values/s); {s.symptoms} symptoms; "
        f"{result.malformed_lines} malformed lines and {s.dead_letters} undecodable messages skipped",
        file=out,
    )
    return 0 if alerts_ok else 1


def _store_options(p: argparse.ArgumentParser, default_dir: Path | None, can_skip: bool = False) -> None:
    where = f"default {default_dir}" if default_dir else "default: do not store"
    p.add_argument(
        "--data-dir", type=Path, default=default_dir, help=f"embedded ClickHouse (chdb) store, {where}"
    )
    p.add_argument(
        "--clickhouse",
        default=None,
        help="store in a server instead: clickhouse://user:password@host:9000/db",
    )
    if can_skip:
        p.add_argument("--no-store", action="store_true", help="do not store rates and anomalies")


def _store_recorder(args: argparse.Namespace, pipeline: Pipeline) -> PipelineRecorder | None:
    """A recorder storing what the pipeline sees, when a store is asked for (or is the default)."""
    target = args.clickhouse or args.data_dir
    if target is None or getattr(args, "no_store", False):
        return None
    from streams.clickhouse_recorder import PipelineRecorder
    from streams.clickhouse_sink import Sink, Store

    return PipelineRecorder(pipeline, Sink(Store.open(target)))


def _both(
    first: Callable[[list[Anomaly]], None], second: Callable[[list[Anomaly]], None]
) -> Callable[[list[Anomaly]], None]:
    def call(events: list[Anomaly]) -> None:
        first(events)
        second(events)

    return call


def _print_stored(recorder: PipelineRecorder, out: TextIO) -> None:
    s = recorder.sink.stats
    print(
        f"\nstored {s.rate_rows} rate rows ({s.rate_rows_skipped} were already stored), {s.anomalies} "
        f"anomaly events, {s.phases} phases, {s.topologies} topologies in {recorder.sink.store.where} "
        f"({s.insert_s:.2f} s inserting)",
        file=out,
    )


def cmd_sink(args: argparse.Namespace) -> int:
    """Runs until SIGINT/SIGTERM (or --idle-exit), then stores and commits what it holds."""
    import signal
    import threading

    from streams.clickhouse_consumer import run_sink
    from streams.clickhouse_sink import Store

    settings = _broker_settings(args)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with Store.open(args.clickhouse or args.data_dir) as store:
        print(
            f"storing into {store.where} from {settings.bootstrap} (group {args.group_id})", file=sys.stderr
        )
        timeout_ms = int(args.rebalance_timeout * 1000)
        session_ms = min(timeout_ms, 10_000)
        options = {
            "max_poll_interval_ms": timeout_ms,
            "session_timeout_ms": session_ms,
            "heartbeat_interval_ms": min(3000, session_ms // 3),
        }
        run_sink(
            settings,
            store,
            args.group_id,
            args.max_rows,
            args.max_delay,
            stop,
            args.idle_exit,
            consumer_options=options,
            report=print,
        )
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from ingest.collect import discover, poll
    from ingest.host_collector import run_ethtool

    if not 0.1 <= args.interval <= 10:
        raise ValueError(f"--interval {args.interval}: must be between 0.1 and 10 seconds")
    targets = discover(args.sysfs_root, args.device)
    ethtool = None if args.no_ethtool else run_ethtool
    meta = {"poll_interval_s": args.interval, "devices": [t.ib_dev for t in targets]}
    snapshots = 0
    with TraceWriter(args.out, "collect", time.time_ns(), meta) as writer:
        try:
            for snap in poll(args.sysfs_root, targets, args.interval, args.count, args.host, ethtool, _warn):
                writer.write_message(topics.COUNTERS, snap.device, snap.ts_ns, snap)
                snapshots += 1
        except KeyboardInterrupt:
            pass
    print(f"wrote {args.out}: {snapshots} snapshots of {', '.join(t.ib_dev for t in targets)}")
    return 0


def _warn(text: str) -> None:
    print(f"fabricwatch collect: {text}", file=sys.stderr)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Exit 1 when a threshold fails, so CI can gate on the suite; usage and config errors exit 2."""
    from fabricwatch.evaluate import (
        RULE_KINDS,
        ScenarioResult,
        pipeline_with_model,
        run_suite,
        scenario_paths,
    )

    paths = scenario_paths(args.scenarios)
    config = load_config(args.config)
    done = 0

    def progress(r: ScenarioResult) -> None:
        nonlocal done
        done += 1
        found = sum(lb.detected for lb in r.labels)
        print(
            f"[{done}/{len(paths)}] {r.name}: {found}/{len(r.labels)} faults found, "
            f"{len(r.false_alerts)} false alerts ({r.wall_s:.1f} s replay)",
            file=sys.stderr,
        )

    factory, kinds = Pipeline, RULE_KINDS
    if args.model is not None:
        factory, kinds = functools.partial(pipeline_with_model, args.model), RULE_KINDS | {"outlier"}
    report = run_suite(paths, config, args.seed, factory, kinds, workers=args.jobs, on_result=progress)
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        console.print_suite(report, sys.stdout)
    return 0 if report.passed else 1


def _outlier_detector(path: Path, args: argparse.Namespace, config: DetectorConfig) -> OutlierDetector | None:
    """The learned outlier detector when a model is given or learned; none otherwise (no cost,
    scikit-learn not even imported)."""
    if args.model is None and args.train_minutes is None:
        return None
    from detectors.outliers import OutlierDetector, OutlierModel
    from fabricwatch.train import train_outliers

    if args.model is not None and args.train_minutes is not None:
        raise ValueError("--model and --train-minutes: give one of them")
    if args.model is not None:
        return OutlierDetector(OutlierModel.load(args.model), config.outliers)
    if args.train_minutes is not None:
        return OutlierDetector(train_outliers([path], config, args.train_minutes), config.outliers)


def cmd_train(args: argparse.Namespace) -> int:
    from fabricwatch.train import train_outliers

    config = load_config(args.config)
    started = time.perf_counter()
    model = train_outliers(args.traces, config, args.minutes)
    if not model.classes:
        raise ValueError(f"no port class had enough baseline rows: {model.meta['skipped_classes']}")
    model.save(args.out)
    thresholds = model.thresholds(config.outliers.threshold_quantile)
    for name, m in model.classes.items():
        print(
            f"{name}: {m.rows} rows, {len(m.features)} features, "
            f"threshold {thresholds[name]:.4f} at quantile {config.outliers.threshold_quantile}"
        )
    for name, why in model.meta["skipped_classes"].items():
        print(f"{name}: not trained ({why})")
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s"
    )
    return 0


def cmd_grafana(args: argparse.Namespace) -> int:
    from fabricwatch.grafana import (
        GrafanaClient,
        GrafanaError,
        parse_clickhouse_url,
        read_anomalies,
        resolve_auth,
    )

    token, basic = resolve_auth(args.token_file, args.user)
    target = parse_clickhouse_url(args.clickhouse_url, os.environ.get("FABRICWATCH_CLICKHOUSE_PASSWORD", ""))
    anomalies = read_anomalies(args.anomalies) if args.anomalies else []
    if args.from_store:
        anomalies += _stored_anomalies(args.from_store, args.since)
    client = GrafanaClient(args.url, token=token, basic_auth=basic, log=print)
    try:
        result = client.push(
            target,
            anomalies,
            datasource_uid=args.datasource_uid,
            folder_uid=args.folder_uid,
            annotate_dashboard=args.annotate_dashboard,
        )
    except GrafanaError as exc:
        print(f"fabricwatch grafana {args.grafana_command}: {exc}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{result.count(a)} {a}" for a in ("created", "updated", "unchanged"))
    print(f"grafana push to {args.url}: {counts}")
    return 0


def _replay_alerts(args: argparse.Namespace) -> ReplayAlerts | None:
    if getattr(args, "alerts", None) is None:
        return None
    from alerts.commands import ReplayAlerts
    from alerts.config import load_alerts_config

    return ReplayAlerts(load_alerts_config(args.alerts))


def cmd_alert(args: argparse.Namespace) -> int:
    from alerts.commands import run_alert

    return run_alert(_broker_settings(args), args.config, args.group_id, sys.stdout)


def cmd_silence(args: argparse.Namespace) -> int:
    from alerts.commands import add_silence

    return add_silence(args.file, args.matchers, args.duration, args.comment, args.author, sys.stdout)


def _stored_anomalies(target: str, since: str | None) -> list[Anomaly]:
    from fabricwatch.grafana import anomalies_from_store
    from fabricwatch.report import parse_time
    from streams.clickhouse_sink import Store

    if "://" not in target and not Path(target).is_dir():
        raise ValueError(f"--from-store {target}: no store there")
    with Store.open(target) as store:
        return anomalies_from_store(store, parse_time(since))


def cmd_report(args: argparse.Namespace) -> int:
    from fabricwatch.report import parse_time, write_report
    from streams.clickhouse_backend import StoreError
    from streams.clickhouse_sink import Store

    if args.clickhouse is None and not args.data_dir.is_dir():
        raise ValueError(f"--data-dir {args.data_dir}: no store there (replay or demo with a store first)")
    try:
        with Store.open(args.clickhouse or args.data_dir) as store:
            start, end = parse_time(args.start), parse_time(args.end)
            paths = write_report(
                store, args.out, start, end, max_ports=args.ports, resolution=args.resolution
            )
    except StoreError as exc:
        print(f"fabricwatch report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths) - 1} charts and {paths[-1]}")
    return 0


_COMMANDS = {
    "simulate": cmd_simulate,
    "replay": cmd_replay,
    "demo": cmd_demo,
    "collect": cmd_collect,
    "evaluate": cmd_evaluate,
    "train": cmd_train,
    "record": cmd_record,
    "alert": cmd_alert,
    "silence": cmd_silence,
    "worker": cmd_worker,
    "run": cmd_run,
    "sink": cmd_sink,
    "grafana": cmd_grafana,
    "report": cmd_report,
}


if __name__ == "__main__":
    sys.exit(main())
