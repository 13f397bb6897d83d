"""Shared fixtures: a real Kafka-protocol broker (Tansu) per test, a real ``clickhouse-server``
process, and a store on either backend.

Tests that start real processes (the broker, a ClickHouse server, workers) are marked
``integration`` here, by the fixtures they use or in their module, so that
``pytest -m "not integration"`` is the fast loop.

The server is Debian's ``clickhouse-server`` package (18.16) started as an ordinary process with
its config, data and logs in a temporary directory, on free loopback ports; it is stopped after the
session. Tests that need it skip, saying why, only when the binary is not installed (``.ci/run``
installs it).
"""

from __future__ import annotations

import itertools
import logging
import shutil
import subprocess
import sys
import time
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import streaming
from helpers.paths import FIXTURES, ROOT, SCENARIOS

from fabricwatch.daemon_logs import CHATTY
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.summary import summarise
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.ingest.simulator.ttar import extract_ttar
from fabricwatch.local.broker import EmbeddedBroker
from fabricwatch.local.clickhouse_server import LocalClickHouse, server_binary
from fabricwatch.local.workers import WorkerProcess
from fabricwatch.replay import replay_trace
from fabricwatch.streams.kafka_io import BrokerSettings, ensure_topics

_databases = itertools.count()
_PROCESS_FIXTURES = {
    "broker",
    "embedded_broker",
    "clickhouse_server",
    "clickhouse_url",
    "store_target",
    "wheel",
    "plain_install",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Two reasons a test is not in the fast loop, marked apart so either can be chosen: it starts
    real processes (``processes``: a broker, a ClickHouse or Redis server, workers, a venv), by the
    fixtures it uses or in its module; or it takes long in one process (``slow``: whole scenarios
    replayed, a store filled). Both are ``integration``, which ``-m "not integration"`` leaves out."""
    for item in items:
        if _PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.processes)
        if item.get_closest_marker("processes") or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A daemon's command run in this process sets up logging for the process (its handler on the
    root logger, the libraries' levels); the next test gets the logging it would have had alone."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    chatty = {name: logging.getLogger(name).level for name in CHATTY}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in chatty.items():
        logging.getLogger(name).setLevel(was)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """The procfs project's /sys tree of one NIC (mlx5_0, MT4118, one InfiniBand port), rebuilt on
    disk from ``fixtures/`` (source in ``fixtures/SOURCES.md``)."""
    extract_ttar(FIXTURES / "sysfs_infiniband_mlx5_0_counters_hw_counters_procfs_fixture.ttar", tmp_path)
    return tmp_path / "fixtures" / "sys"


@pytest.fixture
def embedded_broker() -> Iterator[EmbeddedBroker]:
    """A fresh embedded broker per test: topics are global names, and Tansu starts in a fraction
    of a second. No topic exists yet (what creates them is often under test)."""
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def broker(embedded_broker: EmbeddedBroker) -> BrokerSettings:
    """The settings of ``embedded_broker``, as every client takes them."""
    return BrokerSettings(bootstrap=embedded_broker.bootstrap)


def _need_server() -> None:
    if server_binary() is None:
        pytest.skip("clickhouse-server is not installed (apt-get install -y clickhouse-server)")


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClickHouse]:
    """One server for the session; each test takes its own database (``clickhouse_url``)."""
    _need_server()
    with LocalClickHouse(tmp_path_factory.mktemp("clickhouse-server")) as server:
        yield server


@pytest.fixture
def clickhouse_url(clickhouse_server: LocalClickHouse) -> str:
    """A URL naming a fresh database on the session's server."""
    return clickhouse_server.url(f"fw_test_{next(_databases)}")


@pytest.fixture(params=["chdb", "server"])
def store_target(request: pytest.FixtureRequest, tmp_path) -> str:
    """Where to open a Store: a chdb data directory, or a database on the real server.

    chdb holds one data directory per process, so a test closes its stores before it ends."""
    if request.param == "chdb":
        return str(tmp_path / "store")
    return request.getfixturevalue("clickhouse_url")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our wheel, built from a copy of the source tree, so no earlier build's leftovers end up in it."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, source],
        check=True,
        capture_output=True,
    )
    return next(out.glob("fabricwatch-*.whl"))


@pytest.fixture(scope="session")
def plain_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``python`` of a venv holding our wheel as ``pip install .`` leaves it, not the ``-e``
    install the suite runs under (whose import hook finds the rooms wherever the current directory
    is). Our dependencies come from the system site-packages, so nothing large is downloaded."""
    env = tmp_path_factory.mktemp("plain") / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env)
    python = env / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", wheel], check=True, capture_output=True
    )
    # The system site-packages hold the suite's -e install, whose import hook would supply any room
    # the wheel lacks: every package must come from the venv's own copy, or the venv proves nothing.
    where = subprocess.run(
        [
            python,
            "-c",
            "import pkgutil, sysconfig, fabricwatch\n"
            "site = sysconfig.get_paths()['purelib']\n"
            "for m in pkgutil.walk_packages(fabricwatch.__path__, 'fabricwatch.'):\n"
            "    if m.ispkg:\n"
            "        origin = __import__(m.name, fromlist=['_']).__file__\n"
            "        print(m.name, origin.startswith(site))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    outside = [line for line in where if line.endswith(" False")]
    assert not outside, outside
    listed = {"fabricwatch"} | {line.split()[0] for line in where if line}
    promised = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert listed == set(promised)  # a room the wheel lacks is not listed, and would come from -e
    return python


@pytest.fixture(scope="session")
def demo_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scenario simulated once for the session (its 180 s: an incast, a storm, a collapse)."""
    path = tmp_path_factory.mktemp("demo") / "demo.trace.gz"
    simulate(load_scenario(SCENARIOS / "demo.yaml"), path)
    return path


@pytest.fixture(scope="session")
def fabric_stream(tmp_path_factory: pytest.TempPathFactory) -> list:
    """What the storage sink consumes, in order: the PortRates, phases, topology and anomalies of a
    simulated 30 s of the demo fabric (clock started an hour ago), as stage 1/2 would publish them."""
    scenario = SCENARIOS / "demo.yaml"
    trace = tmp_path_factory.mktemp("stream") / "demo.trace.gz"
    start_ns = (time.time_ns() - 3600 * 10**9) // 10**9 * 10**9
    simulate(load_scenario(scenario, {"duration": 30, "start_time": start_ns}), trace)

    out: list = []
    pipeline = Pipeline()
    pipeline.on_frame = lambda f: out.append(
        summarise(f, pipeline.stage1.fabric.port_speeds_bps(f.device, f.ports))
    )
    pipeline.on_context = out.append
    replay_trace(trace, pipeline, out.extend)
    return out


@pytest.fixture
def workers(broker: BrokerSettings, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Two worker processes on ``broker`` (its topics created), stopped at the end."""
    ensure_topics(broker)
    started = [
        WorkerProcess(broker.bootstrap, tmp_path / f"worker{i}.log", streaming.SESSION_TIMEOUT_S)
        for i in range(2)
    ]
    yield started
    for w in started:
        w.stop()
