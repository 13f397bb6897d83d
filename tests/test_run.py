"""The README's demo command, as a user runs it: ``fabricwatch run`` with embedded everything."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # real processes: broker, workers, servers


def test_run_streams_the_demo_shows_its_anomalies_stores_them_and_writes_the_report(tmp_path):
    data, report = tmp_path / "data", tmp_path / "report"
    cmd = [sys.executable, "-m", "fabricwatch", "run", "--duration", "75", "--speed", "15"]
    cmd += ["--data-dir", str(data), "--report", str(report)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "embedded Kafka-protocol broker (Tansu)" in out
    firing = [line for line in out.splitlines() if " FIRING " in line]
    assert any("incast" in line and "leaf01:Ethernet8" in line for line in firing), out
    assert any("pfc_storm" in line and "h002/mlx5_0:1" in line for line in firing), out
    assert "0 failed, 0 dropped" in out
    assert (report / "index.html").is_file()
    assert len(list(report.glob("*.png"))) >= 3
    assert any(data.iterdir())
