"""What the ``fabricwatch`` command runs for alerts: delivery during a replay, the ``alert``
consumer, and ``silence`` (add a silence to a silences file)."""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from fabricwatch.alerts.config import AlertsConfig, load_alerts_config, parse_duration
from fabricwatch.alerts.delivery import stats_json
from fabricwatch.alerts.service import AlertService
from fabricwatch.alerts.silences import parse_silences, read_silence_items
from fabricwatch.schemas.config import ConfigError
from fabricwatch.schemas.messages import Anomaly
from fabricwatch.streams.kafka_io import BrokerSettings


class ReplayAlerts:
    """Alert delivery inside ``fabricwatch replay``. On the trace clock (the default,
    ``replay_clock: trace``) group_wait/group_interval are trace seconds, so a replay at full speed
    makes the notifications the live pipeline would have made, in the same grouping; on the wall
    clock they are real seconds while the trace flies past. At the end, what is still waiting for a
    group timer is flushed, and delivery is given until every receiver's ``give_up_after``."""

    PROGRESS_EVERY_S = 10.0

    def __init__(self, config: AlertsConfig, progress: TextIO | None = None) -> None:
        """``progress`` gets a line every ``PROGRESS_EVERY_S`` while deliveries are waited for
        (the CLI passes stderr when it is a terminal, nothing when it is piped)."""
        self.config = config
        self.trace_clock = config.replay_clock == "trace"
        self.service = AlertService(config, wall=not self.trace_clock)
        self.progress = progress
        self._last = 0.0

    def feed(self, events: list[Anomaly]) -> None:
        for a in events:
            now = a.ts_ns / 1e9 if self.trace_clock else None
            self.service.ingest(a, now=now)
            self._last = max(self._last, now or 0.0)

    def finish(self, out: TextIO) -> bool:
        """Flush, wait for delivery, print a summary; False when anything was given up or left."""
        self.service.flush_all(self._last if self.trace_clock else None)
        patience = max(r.give_up_after for r in self.config.receivers.values()) + 1
        self._drain(time.monotonic() + patience)
        stats = stats_json(self.service.queues)
        self.service.close()
        delivered = sum(s["delivered"] for s in stats.values())
        given_up = sum(s["given_up"] for s in stats.values())
        left = sum(s["pending"] for s in stats.values())
        where = f" (recorded in {self.config.give_up_log})" if given_up and self.config.give_up_log else ""
        print(
            f"alerts: {self.service.notifications} notifications, {delivered} delivered, "
            f"{given_up} given up{where}, {left} undelivered",
            file=out,
        )
        return given_up == left == 0

    def _drain(self, deadline: float) -> None:
        """Wait for delivery until ``deadline``, saying what is waited for and for how long."""
        while True:
            left = deadline - time.monotonic()
            pending = self.service.pending
            if pending and self.progress is not None:
                errors = {
                    q.stats.last_error
                    for q in self.service.queues.values()
                    if q.pending and q.stats.last_error
                }
                why = f" (last error: {sorted(errors)[0]})" if errors else ""
                print(
                    f"alerts: waiting for {pending} notifications to be delivered{why}; "
                    f"giving up in {max(0.0, left):.0f} s (give_up_after); Ctrl-C stops",
                    file=self.progress,
                    flush=True,
                )
            if self.service.drain(min(self.PROGRESS_EVERY_S, max(0.0, left))) or left <= 0:
                return


def run_alert(
    settings: BrokerSettings,
    config_path: Path,
    group_id: str,
    out: TextIO,
    stop: threading.Event,
    web: tuple[str, int] | None = None,
    consumer_options: dict[str, int] | None = None,
) -> None:
    """``fabricwatch alert``: consume until ``stop`` (SIGINT/SIGTERM), then drain and commit."""
    from fabricwatch.alerts.consumer import run_consumer

    config = load_alerts_config(config_path)
    print(
        f"alert: consuming from {settings.bootstrap} as {group_id}; receivers {', '.join(config.receivers)}",
        file=out,
    )
    stats = run_consumer(settings, config, stop, group_id, web=web, consumer_options=consumer_options)
    delivered = sum(d["delivered"] for d in stats.delivery.values())
    given_up = sum(d["given_up"] for d in stats.delivery.values())
    print(
        f"alert: {stats.consumed} anomalies consumed ({stats.malformed} malformed), "
        f"{stats.notifications} notifications: {delivered} delivered, {given_up} given up; "
        f"{stats.commits} commits",
        file=out,
    )


def add_silence(
    path: Path, matchers: list[str], duration: str, comment: str, author: str, out: TextIO
) -> int:
    """Append a silence to a silences file (created if missing); a running alerter re-reads it."""
    import yaml

    now = time.time()
    entry = {
        "matchers": matchers,
        "starts_at": datetime.fromtimestamp(now, UTC).isoformat(),
        "ends_at": datetime.fromtimestamp(now + parse_duration(duration, "--for"), UTC).isoformat(),
        "comment": comment,
        "created_by": author,
    }
    parse_silences([entry], "--matcher")
    live = [s for s in read_silence_items(path) if _ends(s) > now]
    live.append(entry)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump({"silences": live}, sort_keys=False), encoding="utf-8")
    tmp.replace(path)
    print(f"silenced {', '.join(matchers)} until {entry['ends_at']} ({len(live)} active in {path})", file=out)
    return 0


def _ends(item: object) -> float:
    try:
        return parse_silences([item], "silence")[0].ends_at
    except ConfigError as exc:
        print(f"dropping an unreadable silence: {exc}", file=sys.stderr)
        return 0.0
