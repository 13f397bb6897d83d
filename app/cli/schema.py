"""``fabricwatch schema``: print the ClickHouse DDL."""

from __future__ import annotations

import argparse

HELP = "print the ClickHouse DDL (to review it, or to apply it to a sharded cluster by hand)"
DESCRIPTION = """Print every statement that creates the store at the current schema version, for a
server version, optionally ON CLUSTER with local tables behind Distributed ones. The sink and the
other commands apply the same statements themselves on a single server or chdb."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "--server-version", default="26.9", help="version of the target server (default: 26.9, a current one)"
    )
    p.add_argument("--database", default="fabricwatch", help="database name (default: fabricwatch)")
    p.add_argument(
        "--cluster", default=None, help="ON CLUSTER name: local tables plus Distributed (default: none)"
    )
    p.add_argument("--replicated", action="store_true", help="Replicated* engines (with --cluster)")


def run(args: argparse.Namespace) -> int:
    from fabricwatch.storage.migrations import full_ddl
    from fabricwatch.storage.schema import Dialect, SchemaOptions

    opts = SchemaOptions(database=args.database, cluster=args.cluster, replicated=args.replicated)
    for statement in full_ddl(Dialect.parse(args.server_version), opts):
        print(statement + ";\n")
    return 0
