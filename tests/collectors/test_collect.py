"""`fabricwatch collect` on a real sysfs tree (the procfs project's mlx5_0 fixture, rebuilt on disk)
with real mlx5 `ethtool -S` output: what lands in the trace replays through the pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers.paths import FIXTURES

from fabricwatch.cli.main import main
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.nic.device import EthtoolError
from fabricwatch.ingest.nic.parsers import EthtoolStats, parse_ethtool_stats
from fabricwatch.ingest.nic.poll import CollectStats, discover, poll
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Snapshot, decode
from fabricwatch.schemas.trace import TraceReader

MLX5_ETHTOOL = (FIXTURES / "ethtool_mlx5_cx6dx_k5.15_xdp_filtered.txt").read_text()


@pytest.fixture
def sysfs(sysfs: Path) -> Path:
    """The shared tree, with mlx5_0's netdev (ens1f0) under its PCI function, as a RoCE NIC has."""
    (sysfs / "class" / "infiniband" / "mlx5_0" / "device" / "net" / "ens1f0").mkdir(parents=True)
    return sysfs


def test_collect_writes_a_trace_that_replays(sysfs, tmp_path, capsys):
    out = tmp_path / "host.trace.gz"
    argv = ["collect", "--sysfs-root", str(sysfs), "--out", str(out), "--count", "3", "--interval", "0.1"]
    assert main([*argv, "--no-ethtool", "--host", "gpu7"]) == 0
    assert "3 snapshots of mlx5_0" in capsys.readouterr().out
    with TraceReader(out) as reader:
        snaps = [decode(r.value(), Snapshot) for r in reader]
        assert reader.header.meta["poll_interval_s"] == 0.1
    assert [s.device for s in snaps] == ["gpu7/mlx5_0"] * 3
    assert snaps[0].ts_ns < snaps[1].ts_ns < snaps[2].ts_ns
    assert 0.08e9 < snaps[2].ts_ns - snaps[1].ts_ns < 0.5e9
    result = replay_trace(out, Pipeline())
    assert result.pipeline.stage1.rates.stats.frames == 2  # two intervals from three polls
    assert result.pipeline.stats.dead_letters == 0 and result.anomalies == []


def test_netdev_found_in_sysfs_and_ethtool_counters_joined(sysfs):
    targets = discover(sysfs)
    assert [(t.ib_dev, t.netdev) for t in targets] == [("mlx5_0", "ens1f0")]
    asked = []

    def ethtool(netdev: str) -> EthtoolStats:
        asked.append(netdev)
        return parse_ethtool_stats(MLX5_ETHTOOL)

    (snap,) = poll(sysfs, targets, 0.1, 1, host="gpu7", ethtool=ethtool)
    names = {c.name for c in snap.counters}
    assert asked == ["ens1f0"]
    assert {"tx_pause_frames", "rx_discards"} <= names  # from ethtool
    assert {"out_of_sequence", "tx_wait"} <= names  # from sysfs hw_counters and counters


def test_failing_ethtool_is_reported_once_and_sysfs_counters_still_flow(sysfs):
    warnings: list[str] = []

    def broken(netdev: str) -> EthtoolStats:
        raise EthtoolError("ethtool is not installed")

    snaps = list(poll(sysfs, discover(sysfs), 0.1, 3, ethtool=broken, warn=warnings.append))
    assert len(snaps) == 3 and all("out_of_sequence" in {c.name for c in s.counters} for s in snaps)
    assert len(warnings) == 1 and "its sysfs counters still go out" in warnings[0]


def test_unknown_device_and_bad_interval_are_clear_errors(sysfs, tmp_path, capsys):
    out = str(tmp_path / "x.trace")
    assert main(["collect", "--sysfs-root", str(sysfs), "--out", out, "--device", "mlx5_9"]) == 2
    assert "no RDMA device mlx5_9" in capsys.readouterr().err
    assert main(["collect", "--sysfs-root", str(sysfs), "--out", out, "--interval", "60"]) == 2
    assert "between 0.1 and 10" in capsys.readouterr().err


def unmapped_beside(sysfs: Path) -> None:
    """A HiSilicon RoCE device (hns_roce_hw_v2 driver, no counter map of its own) next to the mlx5
    NIC, with the standard IB port counters. (Found with an hfi1_0, which the collector now knows:
    test_nic_families.py.)"""
    dev = sysfs / "class" / "infiniband" / "hns_0"
    counters = dev / "ports" / "1" / "counters"
    counters.mkdir(parents=True)
    for name, value in {"port_xmit_data": 1000, "port_rcv_data": 2000, "port_xmit_packets": 10}.items():
        (counters / name).write_text(f"{value}\n")
    driver = sysfs / "bus" / "pci" / "drivers" / "hns_roce_hw_v2"
    driver.mkdir(parents=True)
    (dev / "device").mkdir()
    (dev / "device" / "driver").symlink_to(driver)


def test_a_device_without_a_counter_map_costs_only_itself(sysfs, tmp_path, capsys):
    """Found: an hfi1_0 beside mlx5_0 made collect write nothing at all ("cannot tell the NIC
    vendor"), with no option to say the vendor."""
    unmapped_beside(sysfs)
    out = tmp_path / "host.trace"
    argv = ["collect", "--sysfs-root", str(sysfs), "--out", str(out), "--interval", "0.1", "--no-ethtool"]
    assert main([*argv, "--count", "3"]) == 0
    err = capsys.readouterr().err
    assert err.count("hns_0: no counter map for its driver (hns_roce_hw_v2)") == 1  # said once, not per poll
    with TraceReader(out) as reader:
        assert [decode(r.value(), Snapshot).device.split("/")[1] for r in reader] == ["mlx5_0"] * 3

    assert main([*argv, "--count", "2", "--vendor", "hns_0=ib"]) == 0
    with TraceReader(out) as reader:
        snaps = [decode(r.value(), Snapshot) for r in reader]
    hns = [s for s in snaps if s.device.endswith("/hns_0")]
    assert len(snaps) == 4 and len(hns) == 2 and hns[0].source == "ib_counters"
    assert main([*argv, "--vendor", "hns_0=hisilicon"]) == 2
    known = "mlx5, bnxt, irdma, x722, ionic, mlx4, ib"
    assert (
        f"--vendor hns_0=hisilicon: expected DEVICE=VENDOR, VENDOR one of {known}" in capsys.readouterr().err
    )


def test_bad_ethtool_output_costs_only_its_bad_lines_and_every_poll_tries_again(sysfs):
    """Found: one non-UTF-8 byte or a name printed twice in `ethtool -S` made collect exit 2 with
    no snapshot, losing the sysfs counters of that poll and of every later one."""
    broken = MLX5_ETHTOOL.replace("rx_bytes_phy:", "rx_by\ufffdtes_phy:").replace(
        "tx_pause_ctrl_phy: 5745055", "tx_pause_ctrl_phy: 5745055\n     tx_pause_ctrl_phy: 1"
    )
    outputs = iter([broken, "garbage\n", MLX5_ETHTOOL])
    warnings: list[str] = []
    stats = CollectStats()
    snaps = list(
        poll(
            sysfs,
            discover(sysfs),
            0.1,
            3,
            ethtool=lambda _: parse_ethtool_stats(next(outputs)),
            warn=warnings.append,
            stats=stats,
        )
    )
    assert len(snaps) == 3  # every poll has its snapshot
    first, second, third = ({c.name for c in s.counters} for s in snaps)
    assert {
        "rx_discards",
        "out_of_sequence",
    } <= first and "tx_pause_frames" not in first  # only the bad lines lost
    assert "rx_discards" not in second and "out_of_sequence" in second  # no ethtool: sysfs still there
    assert {"rx_discards", "tx_pause_frames"} <= third  # and the next poll reads ethtool again
    assert any("counter name is not text" in w for w in warnings)
    assert any("expected 'NIC statistics:'" in w for w in warnings)
    assert stats.problems == {"mlx5_0": 2}


def test_polls_fall_on_wall_clock_multiples_of_the_interval(sysfs):
    snaps = list(poll(sysfs, discover(sysfs), 0.2, 4, ethtool=None))
    offsets = [(s.ts_ns % 200_000_000) / 1e6 for s in snaps]
    assert all(off < 50 for off in offsets), offsets  # read within 50 ms after each boundary


def test_files_kept_open_read_what_a_fresh_read_does_and_see_each_new_value(sysfs):
    from fabricwatch.ingest.nic.parsers import read_sysfs_port
    from fabricwatch.ingest.nic.sysfs import SysfsPorts

    port = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    with SysfsPorts() as ports:
        assert ports.read(port) == read_sysfs_port(port)
        (port / "counters" / "port_xmit_data").write_text("123456789\n")  # regenerated in place
        assert ports.read(port)[0]["port_xmit_data"] == 123456789
        with pytest.raises(ValueError, match="not an InfiniBand port"):
            ports.read(sysfs)


def test_the_collect_section_of_a_config_file_under_the_environment_under_options(sysfs, tmp_path, capsys):
    from fabricwatch.cli.collect import add_parser, settings_of

    config = tmp_path / "node.yaml"
    config.write_text(
        "collect:\n  interval_s: 0.2\n  host: from-file\n  vendors: {hfi1_0: ib}\n  ethtool: none\n"
    )
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["collect", "--config", str(config), "--vendor", "mlx5_9=mlx5"])
    cfg = settings_of(args, environ={"FABRICWATCH_HOST": "from-env"})
    assert (cfg.interval_s, cfg.host, cfg.ethtool) == (0.2, "from-env", "none")
    assert cfg.vendors == {"hfi1_0": "ib", "mlx5_9": "mlx5"}
    assert (
        settings_of(parser.parse_args(["collect", "--config", str(config), "--host", "flag"]), {}).host
        == "flag"
    )

    config.write_text("collect:\n  intervall_s: 2\n")
    out = str(tmp_path / "t.trace")
    assert main(["collect", "--config", str(config), "--sysfs-root", str(sysfs), "--out", out]) == 2
    assert (
        "node.yaml: collect.intervall_s: unknown key (did you mean `interval_s`?)" in capsys.readouterr().err
    )
