"""Every benchmark runs as a user runs it: ``python bench/<script>.py`` from the repository root
against ``pip install .`` (not the suite's ``-e`` install), at its smallest size, printing JSON
lines. And a benchmark whose child process dies stops with the child's reason instead of waiting.

The figures are not checked here (this machine is shared and noisy): only that each script runs
to its end and says what it measured.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from helpers.paths import ROOT

SMALLEST = {
    "bench_alerts.py": ["--seconds", "1", "--rate", "100"],
    "bench_builds.py": ["--series", "marking,nic", "--rounds", "1", "--repeats", "1", "--nics", "4"],
    "bench_burst.py": ["--seconds", "0.2"],
    "bench_clickhouse.py": ["--rows", "20000", "--batch", "10000", "--repeats", "1", "--backends", "chdb"],
    "bench_codec.py": [],
    "bench_collector.py": ["--polls", "2"],
    "bench_consumer.py": ["--scenario", "scenarios/demo.yaml", "--duration", "5", "--rounds", "1"],
    "bench_core.py": ["--scenario", "scenarios/demo.yaml", "--duration", "20"],
    "bench_outliers.py": ["--seconds", "0.2"],
    "bench_phases.py": ["--seconds", "0.5", "--repeat", "1"],
    "bench_phases_api.py": ["--calls", "1000", "--repeat", "1"],
    "bench_rates.py": ["--seconds", "0.2", "--batch", "100", "--rhythm-nics", "4"],
    "bench_rates_message.py": ["--scenario", "demo.yaml", "--duration", "5"],
    "bench_simulator.py": ["--scenario", "scenarios/demo.yaml"],
    "bench_sonic.py": ["--polls", "2", "--ports", "4"],
    "bench_streaming.py": [
        *("--scenario", "scenarios/demo.yaml", "--duration", "10", "--workers", "1"),
        *("--latency-duration", "10", "--load", "50000"),
    ],
}
NEEDS = {"bench_sonic.py": "redis-server"}
"""Debian packages a script cannot run without (``.ci/run`` installs them)."""


def test_every_benchmark_has_its_smallest_size_here():
    scripts = {p.name for p in (ROOT / "bench").glob("bench_*.py")}
    assert scripts == set(SMALLEST)


@pytest.mark.processes  # a venv, brokers, workers, servers
@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_the_benchmark_runs_against_a_plain_install_from_the_repository_root(script, plain_install):
    if script in NEEDS and shutil.which(NEEDS[script]) is None:
        pytest.skip(f"{NEEDS[script]} is not installed (.ci/run installs it)")
    done = subprocess.run(
        [plain_install, f"bench/{script}", *SMALLEST[script]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout[-2000:]


@pytest.mark.processes  # a broker and a worker
def test_the_streaming_benchmark_s_scale_mode_drains_only_and_says_what_bent_the_curve():
    """``--workers N --partitions P --no-latency``: the backlog drained on P partitions, with the CPU
    ratio to the bare consumer and the broker's own CPU beside the wall-clock figures, and no
    latency run."""
    cmd = [sys.executable, "bench/bench_streaming.py", "--scenario", "scenarios/demo.yaml"]
    cmd += ["--duration", "10", "--workers", "1", "--partitions", "3", "--no-latency"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line["bench"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert set(lines) == {"streaming_backlog", "bare_consumer", "end_to_end"}
    e2e = lines["end_to_end"]
    assert e2e["partitions"] == 3 and e2e["workers"] == 1
    assert 0 < e2e["broker_cpu_share"] < 2 and 0 < e2e["cpu_ratio_to_bare"] < 10
    assert lines["bare_consumer"]["cpu_us_per_message"] > 0
    # what one broker core takes and serves: reported, though this small a backlog may cost the
    # broker less than a clock tick to take or to serve
    assert lines["bare_consumer"]["broker_cpu_us_per_message"] >= 0
    assert lines["streaming_backlog"]["broker_cpu_us_per_message"] >= 0


@pytest.mark.processes  # a broker
def test_the_consumer_benchmark_publishes_each_codec_as_named():
    """Each codec's topic is written with that codec ("none" uncompressed, not the default), and
    read whole by the client measured."""
    cmd = [sys.executable, "bench/bench_consumer.py", "--scenario", "scenarios/demo.yaml"]
    cmd += ["--duration", "5", "--rounds", "1", "--clients", "aiokafka"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    rates = {line["codec"]: line["compression_rate"] for line in lines if line["bench"] == "consumer_publish"}
    assert rates["none"] == 1.0
    assert all(0 < rate < 1 for codec, rate in rates.items() if codec != "none"), rates
    read = {line["codec"] for line in lines if line["bench"] == "consumer" and line["client"] == "aiokafka"}
    assert read == set(rates) == {"zstd", "lz4", "gzip", "none"}


@pytest.mark.processes  # a broker and a worker
def test_a_worker_that_exits_at_start_stops_the_streaming_benchmark_with_its_reason(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text("detectors:\n  incast:\n    ecn_kmin_byte: 1\n")
    cmd = [
        sys.executable,
        "bench/bench_streaming.py",
        *SMALLEST["bench_streaming.py"],
        "--config",
        str(config),
    ]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert time.monotonic() - started < 60
    assert "Traceback" not in done.stderr
    said = done.stderr.strip().splitlines()
    assert len(said) == 1, done.stderr
    assert "the worker (port " in said[0] and "exited with code 2" in said[0], said
    assert "site.yaml: detectors.incast.ecn_kmin_byte: unknown key" in said[0]


@pytest.mark.processes  # a child process
def test_a_child_that_exits_without_answering_stops_its_benchmark_at_once():
    """``bench/children.answer``, as bench_simulator and bench_alerts wait on their children."""
    script = (
        "import multiprocessing as mp, sys\n"
        "from children import answer\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn')\n"
        "    here, there = ctx.Pipe()\n"
        "    child = ctx.Process(target=sys.exit, args=(3,))\n"
        "    child.start()\n"
        "    answer(child, here, 'the simulating child')\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT / "bench", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert time.monotonic() - started < 30
    assert (
        done.stderr.strip()
        == "the simulating child exited with code 3 before answering (its output is above)"
    )
