"""``fabricwatch collect``: this host's RDMA NICs to Kafka (a daemon on every node) or a trace file."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from fabricwatch.cli import collect_gnmi, collect_sonic, options
from fabricwatch.cli.collect_outputs import (
    check_destination,
    outcomes,
    outputs_of,
    serve_metrics,
    with_options,
)
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import encode

if TYPE_CHECKING:
    from fabricwatch.ingest.lldp.lldpcli import LldpWatch
    from fabricwatch.ingest.nic.poll import CollectSettings, NicTarget
    from fabricwatch.streams.kafka_io import Publisher

HELP = "poll this host's RDMA NICs into Kafka (--broker) or a trace file (--out)"
DESCRIPTION = """Poll this host's RDMA NICs (sysfs counters and hw_counters, plus ethtool -S for the
PFC counters) at every wall-clock multiple of --interval and publish one snapshot per NIC per poll
to fabric.counters (--broker; run it on every node), or write them into a trace that replay reads
(--out), or both. A device that cannot be read costs only itself, reported once. SIGTERM or
Ctrl-C stops it after sending what was read."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help=HELP, description=DESCRIPTION)
    sources = p.add_subparsers(
        dest="source", metavar="SOURCE", title="other sources (default: this host's NICs)"
    )
    collect_sonic.add_parser(sources)
    collect_gnmi.add_parser(sources)
    options.add_out(p)
    options.add_broker(p, "Kafka bootstrap HOST:PORT to publish to")
    options.add_config(p, section="collect")
    options.add_interval(p, "polls, 0.1 to 10")
    options.add_count(p, "polls")
    p.add_argument(
        "--device", action="append", default=None, help="RDMA device, e.g. mlx5_0 (repeatable; default: all)"
    )
    p.add_argument(
        "--vendor",
        action="append",
        default=[],
        metavar="DEVICE=VENDOR",
        help="read DEVICE with VENDOR's counter map (mlx5, bnxt, irdma, x722, ionic, mlx4, or ib: the "
        "standard InfiniBand port counters only) when its driver is not one the collector knows "
        "(repeatable; default: from the driver)",
    )
    p.add_argument("--sysfs-root", type=Path, default=None, help="where sysfs is mounted (default: /sys)")
    options.add_host(p, "in device ids (or FABRICWATCH_HOST; default: this host's)")
    p.add_argument(
        "--ethtool",
        choices=("ioctl", "command", "none"),
        default=None,
        help="how to read ethtool -S statistics (the PFC and port counters): the SIOCETHTOOL ioctl, "
        "by running the ethtool binary, or not at all (default: ioctl)",
    )
    p.add_argument("--no-ethtool", action="store_true", help="the same as --ethtool none")
    p.add_argument(
        "--rdma-statistic",
        action="store_true",
        default=None,
        help="also read every RDMA link's hw counters with `rdma -j statistic show` (one fork per "
        "poll): the optional counters, and devices whose sysfs hw_counters a container cannot see "
        "(default: sysfs only)",
    )
    options.add_lldp_interval(p, "this host's cabling from LLDP (lldpd's lldpcli)")
    p.add_argument(
        "--lldp-socket",
        default=None,
        help="lldpd's control socket, for a collector in a container (default: lldpcli's, /run/lldpd.socket)",
    )
    options.add_web(p, "collect")


def settings_of(args: argparse.Namespace, environ: dict[str, str] | None = None) -> CollectSettings:
    """The ``collect:`` section of ``--config`` (FABRICWATCH_HOST over its ``host``), with every
    option given on the command line over both."""
    from fabricwatch.ingest.nic.poll import CollectSettings
    from fabricwatch.schemas.config import ConfigFile

    environ = dict(os.environ) if environ is None else environ
    env = {"host": environ["FABRICWATCH_HOST"]} if environ.get("FABRICWATCH_HOST") else {}
    base = ConfigFile(args.config).section("collect", CollectSettings, env)
    flags = {
        "interval_s": args.interval,
        "devices": args.device,
        "vendors": {**base.vendors, **_vendors(args.vendor)} if args.vendor else None,
        "ethtool": "none" if args.no_ethtool else args.ethtool,
        "rdma_statistic": args.rdma_statistic,
        "sysfs_root": str(args.sysfs_root) if args.sysfs_root is not None else None,
        "host": args.host,
        "lldp_interval_s": args.lldp_interval,
        "lldp_socket": args.lldp_socket,
        "web_bind": args.web_bind,
        "web_port": args.web_port,
    }
    return with_options(base, flags)


def run(args: argparse.Namespace) -> int:
    if args.source == "sonic":
        return collect_sonic.run(args)
    if args.source == "gnmi":
        return collect_gnmi.run(args)
    return _run_host(args)


def _run_host(args: argparse.Namespace) -> int:
    from fabricwatch.collector_metrics import CollectMetrics
    from fabricwatch.ingest.nic.device import SOURCE_ORDER, ethtool_command, rdma_statistic_command
    from fabricwatch.ingest.nic.ethtool_ioctl import EthtoolIoctl
    from fabricwatch.ingest.nic.poll import CollectStats, discover, poll

    cfg = settings_of(args)
    bad = sorted(v for v in cfg.vendors.values() if v not in SOURCE_ORDER)
    if bad:
        raise ValueError(f"collect.vendors: unknown vendor {bad[0]!r}; known: {', '.join(SOURCE_ORDER)}")
    check_destination(args)
    sysfs = Path(cfg.sysfs_root)
    targets = discover(sysfs, cfg.devices or None, cfg.vendors)
    stopping = options.Stopping()
    stop = stopping.event
    stats = CollectStats()
    host = cfg.host or None
    with ExitStack() as stack:
        ethtool = {"none": None, "command": ethtool_command}.get(cfg.ethtool)
        if cfg.ethtool == "ioctl":
            ethtool = stack.enter_context(EthtoolIoctl()).read
        outputs, publisher = outputs_of(args, cfg.interval_s, stack, [t.ib_dev for t in targets])
        metrics = CollectMetrics(stats, cfg.interval_s, outcomes(publisher) if publisher else None)
        serve_metrics(stack, metrics, cfg.web_bind, cfg.web_port, "collect", publisher, _warn)
        lldp = _lldp(cfg, targets, publisher)
        for snap in poll(
            sysfs,
            targets,
            cfg.interval_s,
            args.count,
            host,
            ethtool,
            _warn,
            stats,
            stop,
            metrics.observe_poll,
            rdma_statistic_command if cfg.rdma_statistic else None,
        ):
            for put in outputs:
                put(snap)
            report = lldp.due(time.monotonic()) if lldp is not None else None
            if report is not None and publisher is not None:
                publisher.send(topics.TOPOLOGY, report.source, encode(report), report.ts_ns)
    devices = ", ".join(t.ib_dev for t in targets)
    print(
        f"collected {stats.snapshots} snapshots of {devices} in {stats.polls} polls "
        f"({stats.late_polls} late, {sum(stats.problems.values())} reads that lost something)"
    )
    return stopping.exit_code


def _lldp(cfg: CollectSettings, targets: list[NicTarget], publisher: Publisher | None) -> LldpWatch | None:
    """This host's cabling from LLDP, when publishing (a trace has no use for it)."""
    from fabricwatch.ingest.lldp.lldpcli import LldpWatch, run_lldpcli

    interval = cfg.lldp_interval_s if cfg.lldp_interval_s is not None else 30.0
    if not interval or publisher is None:
        return None
    nics = {t.ib_dev: t.netdev for t in targets if t.netdev}
    socket_path = cfg.lldp_socket or None
    host = cfg.host or socket.gethostname()
    return LldpWatch(host, nics, interval, _warn, read=lambda: run_lldpcli(socket_path))


def _vendors(pairs: list[str]) -> dict[str, str]:
    from fabricwatch.ingest.nic.device import SOURCE_ORDER

    out = {}
    for pair in pairs:
        device, sep, vendor = pair.partition("=")
        if not sep or not device or vendor not in SOURCE_ORDER:
            raise ValueError(
                f"--vendor {pair}: expected DEVICE=VENDOR, VENDOR one of {', '.join(SOURCE_ORDER)}"
            )
        out[device] = vendor
    return out


def _warn(text: str) -> None:
    print(f"fabricwatch collect: {text}", file=sys.stderr, flush=True)
