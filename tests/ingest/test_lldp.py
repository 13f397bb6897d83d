"""Cabling from LLDP: two real ``lldpd`` (Debian's) in network namespaces the test makes, a host
and a leaf joined by a veth pair, and the neighbour that comes out of ``lldpcli``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.waiting import wait_for

from fabricwatch.detectors.topology import TopologyView
from fabricwatch.ingest.lldp.lldpcli import LldpWatch, Neighbour, host_topology, parse_neighbours, run_lldpcli
from fabricwatch.schemas.messages import Device, Link, NicAttachment, Topology

needs_lldpd = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("lldpd") is None or shutil.which("ip") is None,
    reason="needs root, iproute2 and lldpd (Debian's; .ci/run installs it) to make namespaces",
)


class Lldpd:
    """One lldpd in a namespace of its own, on one interface, with its own control socket."""

    def __init__(self, ns: str, interface: str, run_dir: Path) -> None:
        self.socket = str(run_dir / f"{ns}.sock")
        cmd = ["ip", "netns", "exec", ns, "lldpd", "-d", "-u", self.socket, "-p", str(run_dir / f"{ns}.pid")]
        self.proc = subprocess.Popen(
            [*cmd, "-I", interface],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert wait_for(lambda: Path(self.socket).exists(), 10)

    def cli(self, *args: str) -> None:
        """Run an lldpcli command, retried while the daemon is still starting (bounded)."""

        def done() -> bool:
            return subprocess.run(["lldpcli", "-u", self.socket, *args], capture_output=True).returncode == 0

        assert wait_for(done, 10), f"lldpcli {' '.join(args)} failed"

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


@pytest.fixture
def cabled() -> Iterator[tuple[Lldpd, Lldpd]]:
    """Host namespace (interface ens1f0np0) cabled to leaf namespace (swp7), lldpd on both ends.
    The control sockets live in a directory lldpd's own user can reach (pytest's are root-only)."""
    run_dir = Path(tempfile.mkdtemp(prefix="fabricwatch-lldpd-"))
    run_dir.chmod(0o755)
    tag = uuid.uuid4().hex[:6]
    host_ns, leaf_ns = f"fwh-{tag}", f"fwl-{tag}"
    daemons: list[Lldpd] = []
    try:
        for ns in (host_ns, leaf_ns):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(
            ["ip", "link", "add", f"h{tag}", "type", "veth", "peer", "name", f"l{tag}"], check=True
        )
        for end, ns, name in ((f"h{tag}", host_ns, "ens1f0np0"), (f"l{tag}", leaf_ns, "swp7")):
            subprocess.run(["ip", "link", "set", end, "netns", ns, "name", name], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", name, "up"], check=True)
        host, leaf = Lldpd(host_ns, "ens1f0np0", run_dir), Lldpd(leaf_ns, "swp7", run_dir)
        daemons += [host, leaf]
        leaf.cli("configure", "system", "hostname", "leaf07")  # as a switch names itself
        leaf.cli("configure", "lldp", "portidsubtype", "ifname")
        # Every second, not lldpd's 30: a frame sent before the host's daemon watched its interface
        # would otherwise leave the host without a neighbour for the whole wait (CI on 634051a).
        leaf.cli("configure", "lldp", "tx-interval", "1")
        leaf.cli("update")
        yield host, leaf
    finally:
        for d in daemons:
            d.stop()
        for ns in (host_ns, leaf_ns):
            subprocess.run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


@needs_lldpd
def test_the_host_learns_which_leaf_port_its_nic_is_cabled_to(cabled):
    host, _leaf = cabled

    def seen() -> list[Neighbour]:
        return [n for n in parse_neighbours(run_lldpcli(host.socket)) if n.switch == "leaf07"]

    assert wait_for(lambda: seen(), 30)
    assert seen() == [Neighbour("ens1f0np0", "leaf07", "swp7")]
    report = host_topology("gpu7", {"mlx5_0": "ens1f0np0", "mlx5_1": "ens2f0np0"}, seen(), time.time_ns())
    assert report.source == "host:gpu7"
    assert report.nics == [
        NicAttachment("gpu7", "gpu7/mlx5_0", "1", "leaf07", "swp7")
    ]  # mlx5_1: no neighbour


def test_a_host_s_cabling_replaces_a_stale_file_s_for_its_nics_only():
    fabric = Topology(
        ts_ns=1,
        devices=[Device("leaf01", "leaf"), Device("leaf07", "leaf"), Device("spine1", "spine")],
        links=[Link("leaf01", "swp49", "spine1", "swp1"), Link("leaf07", "swp49", "spine1", "swp2")],
        nics=[
            NicAttachment("gpu7", "gpu7/mlx5_0", "1", "leaf01", "swp3"),  # stale: recabled since
            NicAttachment("gpu8", "gpu8/mlx5_0", "1", "leaf01", "swp4"),
        ],
    )
    lldp = host_topology("gpu7", {"mlx5_0": "ens1f0np0"}, [Neighbour("ens1f0np0", "leaf07", "swp7")], 2)
    view = TopologyView()
    view.add(lldp)  # a host may report before the file is read
    merged = {a.nic: (a.leaf, a.leaf_port) for a in view.add(fabric).nics}
    assert merged == {"gpu7/mlx5_0": ("leaf07", "swp7"), "gpu8/mlx5_0": ("leaf01", "swp4")}
    newer_file = Topology(ts_ns=3, devices=fabric.devices, links=fabric.links, nics=fabric.nics)
    assert {a.nic: a.leaf for a in view.add(newer_file).nics}["gpu7/mlx5_0"] == "leaf07"  # kept


def test_lldpcli_output_without_a_usable_neighbour_gives_none():
    mac = [{"type": "mac", "value": "aa:bb:cc:dd:ee:ff"}]
    entry = {"name": "eth0", "chassis": [{"id": mac}], "port": [{"id": mac}]}
    text = json.dumps({"lldp": [{"interface": [entry]}]})
    assert parse_neighbours(text) == []  # a MAC port id and no description: no port name
    assert parse_neighbours('{"lldp": [{}]}') == []
    with pytest.raises(ValueError, match="not JSON"):
        parse_neighbours("lldpd is not running")


def test_the_collector_reports_its_cabling_when_it_changes_and_says_once_when_lldp_fails():
    one = {"name": "ens1f0np0", "chassis": [{"name": [{"value": "leaf07"}]}]}
    outputs = [
        {**one, "port": [{"id": [{"type": "ifname", "value": "swp7"}]}]},
        {**one, "port": [{"id": [{"type": "ifname", "value": "swp7"}]}]},
        None,  # lldpd stopped
        None,
        {**one, "port": [{"id": [{"type": "ifname", "value": "swp9"}]}]},  # recabled
    ]

    def read() -> str:
        entry = outputs.pop(0)
        if entry is None:
            raise RuntimeError("lldpcli failed (exit 1): is lldpd running?")
        return json.dumps({"lldp": [{"interface": [entry]}]})

    said: list[str] = []
    watch = LldpWatch("gpu7", {"mlx5_0": "ens1f0np0"}, 30.0, said.append, read=read)
    reports = [watch.due(t) for t in (0.0, 10.0, 30.0, 60.0, 90.0, 120.0)]
    ports = [r.nics[0].leaf_port if r else None for r in reports]
    assert ports == ["swp7", None, None, None, None, "swp9"]  # 10 s: not due; 30 s: unchanged
    assert said == [
        "LLDP: lldpcli failed (exit 1): is lldpd running?; "
        "cabling not reported until it works (retried every 30 s)",
        "LLDP: read again",
    ]
