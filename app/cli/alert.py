"""``fabricwatch alert``: anomalies from Kafka to webhooks."""

from __future__ import annotations

import argparse
import sys

from fabricwatch.cli import options

HELP = "consume fabric.anomalies and deliver alerts to webhooks"
DESCRIPTION = """Consume fabric.anomalies and deliver Alertmanager v4 (or Slack) webhooks: routing,
grouping timers, retries, HMAC signatures, silences, storm inhibition (docs/alerts.md). Runs until
SIGINT/SIGTERM, then drains and commits."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alert", help=HELP, description=DESCRIPTION)
    options.add_broker(p)
    options.add_config(p, required=True, section="alerts")
    options.add_group_id(p, "fabricwatch-alerts")
    options.add_session_timeout(p)
    options.add_web(p, "alert", bind="127.0.0.1", only_publishing=False)
    options.add_logging(p)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.alerts.commands import run_alert

    options.start_logging(args, "alert")
    stopping = options.Stopping()
    web = (args.web_bind, args.web_port)
    session_ms = int(args.session_timeout * 1000)
    group = {"session_timeout_ms": session_ms, "heartbeat_interval_ms": min(3000, session_ms // 3)}
    settings = options.broker_settings(args)
    run_alert(settings, args.config, args.group_id, sys.stdout, stopping.event, web, group)
    return stopping.exit_code
