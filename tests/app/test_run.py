"""The README's demo command, as a user runs it: ``fabricwatch run`` with embedded everything."""

from __future__ import annotations

import subprocess
import time

import pytest

from fabricwatch.local.processes import fabricwatch_command

pytestmark = pytest.mark.processes  # broker, workers, servers


def test_run_streams_the_demo_shows_its_anomalies_stores_them_and_writes_the_report(tmp_path):
    data, report = tmp_path / "data", tmp_path / "report"
    cmd = [*fabricwatch_command(), "run", "--duration", "75", "--speed", "15"]
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


def test_a_worker_that_exits_at_start_stops_run_within_seconds_with_its_reason_in_one_line(tmp_path):
    """The worker refuses the config file (a key only it reads): ``run`` says so with the worker's
    own words, stops the broker, and exits non-zero without a traceback, instead of waiting."""
    config = tmp_path / "site.yaml"
    config.write_text("detectors:\n  incast:\n    ecn_kmin_byte: 1\n")
    cmd = [*fabricwatch_command(), "run", "--no-store", "--config", str(config)]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    assert took < 10, f"{took:.1f} s"
    assert "Traceback" not in done.stderr
    said = done.stderr.strip().splitlines()
    assert len(said) == 1, done.stderr
    assert said[0].startswith("fabricwatch run: the worker (port "), said
    assert "exited with code 2" in said[0]
    assert "site.yaml: detectors.incast.ecn_kmin_byte: unknown key" in said[0]
