"""``fabricwatch grafana push``: dashboards, datasource and annotations into Grafana."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fabricwatch.schemas.messages import Anomaly

HELP = "push fabricwatch's dashboards and anomalies to Grafana"
DESCRIPTION = """Create or update the Grafana folder, the ClickHouse datasource and the dashboards, and
post incidents as annotations; idempotent (docs/grafana.md)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("grafana", help=HELP, description=DESCRIPTION)
    gsub = p.add_subparsers(dest="grafana_command", required=True)
    push = gsub.add_parser(
        "push",
        help="create or update folder, datasource, dashboards, annotations",
        description=DESCRIPTION,
    )
    push.add_argument("--url", required=True, help="Grafana base URL, e.g. http://grafana:3000")
    push.add_argument(
        "--token-file", type=Path, default=None, help="service-account token (or FABRICWATCH_GRAFANA_TOKEN)"
    )
    push.add_argument(
        "--user", default=None, help="basic auth instead; password in FABRICWATCH_GRAFANA_PASSWORD"
    )
    push.add_argument(
        "--clickhouse-url",
        required=True,
        help="ClickHouse as Grafana reaches it: clickhouse://USER@HOST:9000/DB or http(s)://... "
        "(password in FABRICWATCH_CLICKHOUSE_PASSWORD)",
    )
    push.add_argument(
        "--anomalies", type=Path, default=None, help="anomaly events to annotate (replay --json)"
    )
    push.add_argument(
        "--annotate-dashboard", default=None, help="dashboard uid for annotations (default: the org's)"
    )
    push.add_argument(
        "--from-store",
        default=None,
        help="annotate the incidents of this store (chdb dir or clickhouse:// URL)",
    )
    push.add_argument(
        "--since", default=None, help="with --from-store: incidents active since (ISO 8601 or ns)"
    )
    push.add_argument(
        "--datasource-uid",
        default="fabricwatch-clickhouse",
        help="uid of the ClickHouse datasource (default: fabricwatch-clickhouse)",
    )
    push.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain http to a host other than this one (secrets cross the network in clear text)",
    )
    push.add_argument(
        "--folder-uid", default="fabricwatch", help="uid of the dashboards' folder (default: fabricwatch)"
    )


def run(args: argparse.Namespace) -> int:
    from fabricwatch.dashboards.grafana import (
        GrafanaClient,
        GrafanaError,
        parse_clickhouse_url,
        read_anomalies,
        require_secure,
        resolve_auth,
    )

    require_secure(args.url, args.insecure)
    token, basic = resolve_auth(args.token_file, args.user)
    target = parse_clickhouse_url(args.clickhouse_url, os.environ.get("FABRICWATCH_CLICKHOUSE_PASSWORD", ""))
    anomalies = read_anomalies(args.anomalies) if args.anomalies else []
    if args.from_store:
        anomalies += _stored_anomalies(args.from_store, args.since)
    client = GrafanaClient(args.url, token=token, basic_auth=basic, log=print, insecure=args.insecure)
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


def _stored_anomalies(target: str, since: str | None) -> list[Anomaly]:
    from fabricwatch.storage.queries import anomalies_from_store, parse_time
    from fabricwatch.storage.store import Store

    if "://" not in target and not Path(target).is_dir():
        raise ValueError(f"--from-store {target}: no store there")
    with Store.open(target) as store:
        return anomalies_from_store(store, parse_time(since))
