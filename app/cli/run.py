"""``fabricwatch run``: the whole streaming pipeline on one machine, with nothing installed.

Without ``--broker`` it starts the embedded Tansu broker on a free loopback port; then the Faust
workers as child processes, the ClickHouse sink (embedded chdb under ``--data-dir``) and, with
``--alerts``, the alerter, both as threads; it publishes a simulated fabric live (the demo scenario
by default, its clock starting now), prints anomalies as the workers publish them, and at the end
writes the offline report of the run from the store. Everything it started is stopped on exit, on
Ctrl-C and on errors; the sink stores and commits what it holds first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kafka import KafkaConsumer, TopicPartition

from fabricwatch import console
from fabricwatch.cli import options
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.broker import EmbeddedBroker
from fabricwatch.local.workers import WorkerProcess
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, DecodeError, decode, encode
from fabricwatch.storage.store import DEFAULT_DATA_DIR
from fabricwatch.streams.kafka_io import BrokerSettings, ensure_topics, log_ends
from fabricwatch.streams.traces import PublishResult, publish_trace

HELP = "run the streaming pipeline: embedded broker, workers, a live simulated fabric"
DESCRIPTION = """The streaming pipeline on one machine: the embedded broker (or yours), worker
processes, the ClickHouse sink and, with --alerts, the alerter; a simulated fabric fed live, anomalies
printed as the workers publish them, and the report of the run at the end."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("run", help=HELP, description=DESCRIPTION)
    options.add_broker(r, "use this Kafka HOST:PORT instead of the embedded broker")
    options.add_scenario(r)
    r.add_argument(
        "--duration", type=float, default=None, help="simulated seconds (default: the scenario's duration)"
    )
    r.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    options.add_speed(r, 10.0, "the simulated fabric's ")
    options.add_config(r)
    options.add_json(r, "anomaly events, one a line")
    options.add_store(r, DEFAULT_DATA_DIR, can_skip=True)
    r.add_argument(
        "--report",
        type=Path,
        default=Path("fabricwatch-report"),
        help="directory of the report written at the end (default: fabricwatch-report)",
    )
    options.add_alerts(r)


def run(args: argparse.Namespace) -> int:
    given = args.broker or os.environ.get("FABRICWATCH_BROKER")
    settings = options.broker_settings(args) if given else None
    started = time.monotonic()
    try:
        with _interruptible():
            result = run_pipeline(settings, args.scenario or options.default_scenario(), args, sys.stdout)
    except KeyboardInterrupt:  # everything started is stopped by now, in order
        print(
            f"fabricwatch run: stopped by Ctrl-C after {time.monotonic() - started:.0f} s{_kept(args)}",
            file=sys.stderr,
        )
        return 130
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


@dataclass
class RunResult:
    anomalies: list[Anomaly]
    published: PublishResult
    wall_s: float
    stored: str = ""
    report: list[Path] = field(default_factory=list)


def run_pipeline(
    settings: BrokerSettings | None,
    scenario: Path,
    args: argparse.Namespace,
    out: TextIO,
    log_dir: Path | None = None,
) -> RunResult:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fabricwatch-run-")))
        if settings is None:
            broker = stack.enter_context(EmbeddedBroker())
            settings = BrokerSettings(bootstrap=broker.bootstrap)
            _say(out, args, f"embedded Kafka-protocol broker (Tansu) on {broker.bootstrap}")
        ensure_topics(settings)
        # The sink and the alerter join their groups while the workers start: a Ctrl-C soon after
        # the first alert must still find what was published stored (found: a loaded machine's
        # sink had not joined yet, and the run's embedded broker took the records with it).
        store = None if args.no_store else stack.enter_context(_Store(options.store_target(args)))
        if store is not None:
            stack.enter_context(_Background("sink", _sink, settings, store))
        if args.alerts is not None:
            stack.enter_context(_Background("alerts", _alerts, settings, args.alerts))
        extra = ["--config", str(args.config)] if args.config else []
        logs = log_dir or tmp
        workers = [
            stack.enter_context(WorkerProcess(settings.bootstrap, logs / f"worker{i}.log", extra_args=extra))
            for i in range(args.workers)
        ]
        trace = tmp / "live.trace.gz"
        start_ns = time.time_ns()
        overrides: dict[str, object] = {"start_time": start_ns}
        if args.duration is not None:
            overrides["duration"] = args.duration
        stats = simulate(load_scenario(scenario, overrides), trace, args.seed)
        for w in workers:
            w.wait_ready()
        _say(out, args, f"{len(workers)} worker(s) ready; feeding {scenario.name} at {args.speed:g}x ...")
        _say(
            out,
            args,
            f"times below are the simulated fabric's: its clock started now and runs {args.speed:g}x "
            "faster than yours",
        )
        watcher = stack.enter_context(_watch(settings))
        feed = _Feed(trace, settings, args.speed)
        stack.callback(feed.stop)  # on Ctrl-C or an error, first of all: nothing more is sent
        anomalies: list[Anomaly] = []
        seen: set[tuple[str, str, int]] = set()
        quiet_since = None
        processed = -1
        while True:
            for w in workers:
                w.check()  # a worker that died stops the run with its reason, not a hang
            for a in watcher.poll():
                if (a.fingerprint, a.status, a.ts_ns) in seen:
                    continue  # a redelivery after a takeover: same fingerprint, same event
                seen.add((a.fingerprint, a.status, a.ts_ns))
                anomalies.append(a)
                _show(a, out, args)
                quiet_since = None
            if feed.done():
                # Done when the workers have nothing waiting and have been idle for 3 s: a lag of 0
                # alone was seen while a loaded worker had not fetched its partitions' ends yet.
                now_processed = sum(w.metric("processed_total", 'what="snapshots"') for w in workers)
                if now_processed != processed:
                    processed, quiet_since = now_processed, None
                quiet_since = quiet_since or time.monotonic()
                caught_up = all(w.metric("consumer_lag") == 0 for w in workers)
                if caught_up and time.monotonic() - quiet_since > 3.0:
                    break
        published = feed.result()
        _say(out, args, f"simulated {stats.snapshots} snapshots; stopping workers and broker")
        result = RunResult(anomalies, published, time.monotonic() - started)
        if store is not None:
            _say(out, args, f"waiting for the sink to store everything in {store.where} ...")
            _wait_stored(settings)
            stack.close()  # workers stop, the sink stores and commits, the broker stops; then the report
            result.stored = store.where
            result.report = _report(store.target, args.report, start_ns)
    return result


class _Feed:
    """Publishes the trace in a thread at the chosen pace, as live collectors would."""

    def __init__(self, trace: Path, settings: BrokerSettings, speed: float) -> None:
        self._result: PublishResult | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(trace, settings, speed), daemon=True)
        self._thread.start()

    def _run(self, trace: Path, settings: BrokerSettings, speed: float) -> None:
        try:
            self._result = publish_trace(trace, settings, speed, self._stop)
        except BaseException as exc:
            self._error = exc

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop publishing (what was handed to the producer is flushed) and wait for it."""
        self._stop.set()
        self._thread.join(timeout_s)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> PublishResult:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class _Watcher:
    def __init__(self, consumer: KafkaConsumer) -> None:
        self._consumer = consumer

    def poll(self) -> list[Anomaly]:
        found = []
        for records in self._consumer.poll(timeout_ms=200).values():
            for r in records:
                try:
                    found.append(decode(r.value, Anomaly))
                except DecodeError:
                    continue  # not ours to judge: the sinks dead-letter what they cannot store
        return found


@contextlib.contextmanager
def _watch(settings: BrokerSettings) -> Iterator[_Watcher]:
    """The anomalies topic from its current end: what this run's workers publish."""
    consumer = KafkaConsumer(**settings.kafka_kwargs(), enable_auto_commit=False)
    try:
        parts = consumer.partitions_for_topic(topics.ANOMALIES) or {0}
        tps = [TopicPartition(topics.ANOMALIES, p) for p in sorted(parts)]
        log_ends(consumer, tps)
        yield _Watcher(consumer)
    finally:
        consumer.close()


def _show(a: Anomaly, out: TextIO, args: argparse.Namespace) -> None:
    if args.json:
        out.write(encode(a).decode() + "\n")
    else:
        console.print_event(a, out)
    out.flush()


def _say(out: TextIO, args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=out, flush=True)


def _kept(args: argparse.Namespace) -> str:
    """Where what was stored stays, and how to report on it (never a URL: it may hold a password)."""
    if args.no_store:
        return ""
    if args.clickhouse:
        return "; what was stored stays in ClickHouse (fabricwatch report with the same --clickhouse)"
    return f"; what was stored stays in {args.data_dir} (fabricwatch report --data-dir {args.data_dir})"


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """The first Ctrl-C raises KeyboardInterrupt; later ones are ignored while everything started
    is stopped in order (a second Ctrl-C must not leave a broker or a half-written store)."""
    interrupted: list[bool] = []

    def on_sigint(signum: int, frame: object) -> None:
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Background:
    """A thread running ``target(stop, *args)`` until the ``with`` block ends; its error, if any,
    is raised there."""

    def __init__(self, name: str, target: Callable[..., object], *args: object) -> None:
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(target, args), name=f"fabricwatch-{name}", daemon=True
        )

    def _run(self, target: Callable[..., object], args: tuple) -> None:
        try:
            target(self._stop, *args)
        except BaseException as exc:
            self._error = exc

    def __enter__(self) -> _Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self._error is not None:
            raise self._error


class _Store:
    """The sink's store, opened for the run and closed before the report opens it again (chdb
    allows one open data directory per process)."""

    def __init__(self, target: str | Path) -> None:
        from fabricwatch.storage.store import Store

        self.target = target
        self.store = Store.open(target)
        self.where = self.store.where

    def __enter__(self) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()


_GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "max_poll_interval_ms": 60_000}
"""Short group timeouts: a group join waits for them on the embedded broker."""


def _sink(stop: threading.Event, settings: BrokerSettings, store: _Store) -> None:
    from fabricwatch.storage.consumer import run_sink

    run_sink(settings, store.store, "fabricwatch-sink", stop=stop, consumer_options=_GROUP_TIMEOUTS)


def _alerts(stop: threading.Event, settings: BrokerSettings, config: Path) -> None:
    from fabricwatch.alerts.config import load_alerts_config
    from fabricwatch.alerts.consumer import run_consumer

    run_consumer(settings, load_alerts_config(config), stop, consumer_options=_GROUP_TIMEOUTS)


def _wait_stored(settings: BrokerSettings, timeout_s: float = 60.0) -> None:
    """Until the sink's group has committed every message of the topics it stores."""
    from kafka import KafkaAdminClient

    from fabricwatch.storage.consumer import SINK_TOPICS

    admin = KafkaAdminClient(**settings.kafka_kwargs())
    consumer = KafkaConsumer(**settings.kafka_kwargs(), enable_auto_commit=False)
    try:
        tps = [TopicPartition(t, p) for t in SINK_TOPICS for p in consumer.partitions_for_topic(t) or ()]
        ends = log_ends(consumer, tps)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            committed = admin.list_group_offsets("fabricwatch-sink")["fabricwatch-sink"]
            if all(ends[tp] == 0 or (tp in committed and committed[tp].offset >= ends[tp]) for tp in tps):
                return
            time.sleep(0.5)
    finally:
        consumer.close()
        admin.close()


def _report(target: str | Path, out_dir: Path, start_ns: int) -> list[Path]:
    from fabricwatch.dashboards.report import write_report
    from fabricwatch.storage.store import Store

    with Store.open(target) as store:
        return write_report(store, out_dir, start_ns)
