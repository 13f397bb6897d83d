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
from schemas.messages import Anomaly, encode
from schemas.trace import TraceFormatError, TraceWriter

if TYPE_CHECKING:
    from detectors.outliers import OutlierDetector
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

    args = parser.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (ConfigError, TraceFormatError, ValueError, OSError) as exc:
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
    result = replay_trace(path, Pipeline(config, outliers=outliers), show, malformed)
    pipeline = result.pipeline
    for dl in pipeline.dead_letters:
        print(f"{dl.where}: dead letter ({dl.topic}): {dl.reason}", file=sys.stderr)
    if args.json:
        return 0
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


_COMMANDS = {
    "simulate": cmd_simulate,
    "replay": cmd_replay,
    "demo": cmd_demo,
    "collect": cmd_collect,
    "evaluate": cmd_evaluate,
    "train": cmd_train,
    "record": cmd_record,
    "worker": cmd_worker,
    "run": cmd_run,
}


if __name__ == "__main__":
    sys.exit(main())
