"""``fabricwatch replay``: a trace through the detection pipeline in process, or onto a broker."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from fabricwatch import console
from fabricwatch.cli import options
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Anomaly, encode

if TYPE_CHECKING:
    from fabricwatch.alerts.commands import ReplayAlerts
    from fabricwatch.detectors.config import DetectorConfig
    from fabricwatch.detectors.outliers import OutlierDetector
    from fabricwatch.storage.recorder import PipelineRecorder

HELP = "replay a trace through the detection pipeline in process"
DESCRIPTION = """Replay a trace through the detection pipeline in process (no broker): decode, rates,
per-device detectors, fabric correlation, anomalies. With labels in the trace, also print precision,
recall, root-cause localisation and delay per kind. With --broker, publish the trace to Kafka
instead."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help=HELP, description=DESCRIPTION)
    p.add_argument("trace", type=Path, help="trace file (from simulate, record or collect; .gz or plain)")
    p.add_argument(
        "--with",
        dest="merge",
        type=Path,
        action="append",
        default=[],
        metavar="TRACE",
        help="a trace recorded beside it, replayed among its records by time, such as the phases "
        "`phases import` read from a job's NCCL logs (repeatable; default: none)",
    )
    options.add_detection(p)
    options.add_store(p, None)
    options.add_alerts(p)
    options.add_broker(p, "publish the trace to this Kafka HOST:PORT instead of replaying it")
    options.add_speed(p, 0.0, "with --broker, the trace's ")


def run(args: argparse.Namespace) -> int:
    if args.broker is None:
        return replay(args.trace, args)
    from fabricwatch.streams.traces import publish_trace

    result = publish_trace(args.trace, options.broker_settings(args), args.speed)
    st = result.stats
    print(
        f"published {result.records} records from {args.trace} in {result.wall_s:.1f} s: "
        f"{st.acked} acknowledged, {st.failed} failed, {st.dropped} dropped; "
        f"{result.skipped_labels} labels kept out of the broker"
    )
    if st.last_error:
        print(f"last error: {st.last_error}", file=sys.stderr)
    return 0 if st.failed == st.dropped == 0 else 1


def replay(path: Path, args: argparse.Namespace) -> int:
    """Replay ``path`` as the options say: print, store and alert; exit 1 when an alert was not
    delivered."""
    out = sys.stdout
    side = sys.stderr if args.json else out

    def malformed(line: int, reason: str) -> None:
        print(f"{path}:{line}: skipped malformed record: {reason}", file=sys.stderr)

    def show(events: list[Anomaly]) -> None:
        for a in events:
            if args.json:
                out.write(encode(a).decode() + "\n")
            elif not args.quiet:
                console.print_event(a, out)

    config = options.detector_config(args)
    alerting = _replay_alerts(args)
    pipeline = Pipeline(config, outliers=_outliers(path, args, config))
    recorder = _recorder(args, pipeline)
    on_events = _all(show, alerting and alerting.feed, recorder and recorder.on_anomalies)
    try:
        progress = _progress() if sys.stderr.isatty() else None
        merge = getattr(args, "merge", [])
        result = replay_trace(path, pipeline, on_events, malformed, progress, merge)
        if recorder is not None:
            recorder.finish()
            _print_stored(recorder, side)
    finally:
        if recorder is not None:
            recorder.sink.store.close()
    alerts_ok = alerting is None or alerting.finish(side)
    for dl in result.pipeline.dead_letters:
        print(f"{dl.where}: dead letter ({dl.topic}): {dl.reason}", file=sys.stderr)
    if args.json:
        if result.pipeline.labels:  # a labelled trace is scored in JSON too, as its last line
            out.write(json.dumps(result.evaluation().to_json()) + "\n")
        return 0 if alerts_ok else 1
    print("\nIncidents", file=out)
    console.print_incidents(result.anomalies, out)
    if result.pipeline.labels:
        print("\nScore against the trace's labels", file=out)
        console.print_evaluation(result.evaluation(), out)
    s, wall = result.pipeline.stats, result.wall_s
    print(
        f"\n{s.records} records, {s.snapshots} snapshots, {s.values} counter values in {wall:.2f} s "
        f"({s.values / wall if wall else 0:,.0f} values/s); {s.symptoms} symptoms; "
        f"{result.malformed_lines} malformed lines and {s.dead_letters} undecodable messages skipped",
        file=out,
    )
    return 0 if alerts_ok else 1


def _progress(every_s: float = 5.0) -> Callable[[int, int], None]:
    """A line on the terminal every ``every_s`` while a large trace replays (nothing when piped)."""
    started = last = time.monotonic()

    def say(records: int, ts_ns: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            reached = console.clock(ts_ns)
            print(
                f"replay: {records:,} records, trace time {reached}, {now - started:.0f} s", file=sys.stderr
            )

    return say


def _outliers(path: Path, args: argparse.Namespace, config: DetectorConfig) -> OutlierDetector | None:
    if args.model is not None and args.train_minutes is not None:
        raise ValueError("--model and --train-minutes: give one of them")
    if args.train_minutes is None:
        return options.outlier_detector(args.model, config)
    from fabricwatch.detectors.outliers import OutlierDetector
    from fabricwatch.train import train_outliers

    return OutlierDetector(train_outliers([path], config, args.train_minutes), config.outliers)


def _replay_alerts(args: argparse.Namespace) -> ReplayAlerts | None:
    if args.alerts is None:
        return None
    from fabricwatch.alerts.commands import ReplayAlerts
    from fabricwatch.alerts.config import load_alerts_config

    return ReplayAlerts(load_alerts_config(args.alerts), sys.stderr if sys.stderr.isatty() else None)


def _recorder(args: argparse.Namespace, pipeline: Pipeline) -> PipelineRecorder | None:
    """A recorder storing what the pipeline sees, when a store is asked for (or is the default)."""
    target = options.store_target(args)
    if target is None:
        return None
    from fabricwatch.storage.recorder import PipelineRecorder
    from fabricwatch.storage.sink import Sink
    from fabricwatch.storage.store import Store

    return PipelineRecorder(pipeline, Sink(Store.open(target)))


def _all(*calls: Callable[[list[Anomaly]], None] | None) -> Callable[[list[Anomaly]], None]:
    wanted = [c for c in calls if c is not None]

    def call(events: list[Anomaly]) -> None:
        for c in wanted:
            c(events)

    return call


def _print_stored(recorder: PipelineRecorder, out: TextIO) -> None:
    s = recorder.sink.stats
    print(
        f"\nstored {s.rate_rows} rate rows ({s.rate_rows_skipped} were already stored), {s.anomalies} "
        f"anomaly events, {s.phases} phases, {s.topologies} topologies in {recorder.sink.store.where} "
        f"({s.insert_s:.2f} s inserting)",
        file=out,
    )
