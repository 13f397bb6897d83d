"""`fabricwatch collect` on a real sysfs tree (the procfs project's mlx5_0 fixture, rebuilt on disk)
with real mlx5 `ethtool -S` output: what lands in the trace replays through the pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from ttar import extract_ttar

from fabricwatch.cli.main import main
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.collect import discover, poll
from fabricwatch.ingest.host_collector import EthtoolError
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Snapshot, decode
from fabricwatch.schemas.trace import TraceReader

FIXTURES = Path(__file__).parent / "fixtures"
SYSFS_TTAR = FIXTURES / "sysfs_infiniband_mlx5_0_counters_hw_counters_procfs_fixture.ttar"
MLX5_ETHTOOL = (FIXTURES / "ethtool_mlx5_cx6dx_k5.15_xdp_filtered.txt").read_text()


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    extract_ttar(SYSFS_TTAR, tmp_path)
    root = tmp_path / "fixtures" / "sys"
    (root / "class" / "infiniband" / "mlx5_0" / "device" / "net" / "ens1f0").mkdir(parents=True)
    return root


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

    def ethtool(netdev: str) -> str:
        asked.append(netdev)
        return MLX5_ETHTOOL

    (snap,) = poll(sysfs, targets, 0.1, 1, host="gpu7", ethtool=ethtool)
    names = {c.name for c in snap.counters}
    assert asked == ["ens1f0"]
    assert {"tx_pause_frames", "rx_discards"} <= names  # from ethtool
    assert {"out_of_sequence", "tx_wait"} <= names  # from sysfs hw_counters and counters


def test_failing_ethtool_is_reported_once_and_sysfs_counters_still_flow(sysfs):
    warnings: list[str] = []

    def broken(netdev: str) -> str:
        raise EthtoolError("ethtool is not installed")

    snaps = list(poll(sysfs, discover(sysfs), 0.1, 3, ethtool=broken, warn=warnings.append))
    assert len(snaps) == 3 and all("out_of_sequence" in {c.name for c in s.counters} for s in snaps)
    assert len(warnings) == 1 and "sysfs counters only" in warnings[0]


def test_unknown_device_and_bad_interval_are_clear_errors(sysfs, tmp_path, capsys):
    out = str(tmp_path / "x.trace")
    assert main(["collect", "--sysfs-root", str(sysfs), "--out", out, "--device", "mlx5_9"]) == 2
    assert "no RDMA device mlx5_9" in capsys.readouterr().err
    assert main(["collect", "--sysfs-root", str(sysfs), "--out", out, "--interval", "60"]) == 2
    assert "between 0.1 and 10" in capsys.readouterr().err
