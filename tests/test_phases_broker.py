"""`fabricwatch phases collect --broker` on a node: eight rank processes write NCCL logs as a job
does (INIT lines, then thousands of COLL lines a second, each log rotated mid-run), and the
collector process follows them into fabric.phases on a real broker (Tansu) with no line lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from streaming import Collector
from waiting import wait_for

from fabricwatch.local.broker import free_port
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Phase, decode

pytestmark = pytest.mark.integration
RANKS = 8
CALLS_PER_S = 1000
SECONDS = 3.0


def write_rank_log(path: Path, rank: int, stop_at: float, written: list[int]) -> None:
    """One rank's NCCL log: its INIT line, then AllReduce and AllGather calls alternating in bursts,
    CALLS_PER_S a second, the file rotated (renamed, a new one begun) halfway."""
    pid = 4000 + rank
    host = f"gpu{rank // 4}"
    out = open(path, "a", buffering=1)  # noqa: SIM115 (rotated below)
    out.write(
        f"{host}:{pid}:{pid} [{rank % 4}] NCCL INFO comm 0x{rank:x}00 rank {rank} nranks {RANKS} "
        f"cudaDev {rank % 4} busId 1000 commId 0xc0ffee - Init COMPLETE\n"
    )
    n, rotated, start = 0, False, time.monotonic()
    while time.monotonic() < stop_at:
        if not rotated and time.monotonic() - start > SECONDS / 2:
            out.close()
            os.rename(path, f"{path}.1")
            out = open(path, "a", buffering=1)  # noqa: SIM115
            rotated = True
        op = "AllReduce" if (n // 100) % 2 == 0 else "AllGather"
        out.write(
            f"{host}:{pid}:{pid + 1} [{rank % 4}] NCCL INFO {op}: opCount {n:x} sendbuff 0x1 recvbuff 0x2 "
            f"count 262144 datatype 7 op 0 root 0 comm 0x{rank:x}00 [nranks={RANKS}] stream 0x9\n"
        )
        n += 1
        time.sleep(max(0.0, start + n / CALLS_PER_S - time.monotonic()))
    out.close()
    written[rank] = n


def test_eight_ranks_logs_reach_fabric_phases_with_no_line_lost(broker, tmp_path):
    logs = tmp_path / "nccl"
    logs.mkdir()
    phases = Collector(broker, topics.PHASES)
    argv = [
        "phases",
        "collect",
        "--job",
        "llama-8b",
        "--log",
        str(logs / "*.log"),
        "--broker",
        broker.bootstrap,
    ]
    web = free_port()
    collector = subprocess.Popen(
        [sys.executable, "-m", "fabricwatch", *argv, "--interval", "0.1", "--web-port", str(web)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    time.sleep(1.5)  # the collector is following the (empty) directory: every rank file is new to it
    written = [0] * RANKS
    stop_at = time.monotonic() + SECONDS
    writers = [
        threading.Thread(target=write_rank_log, args=(logs / f"rank{r}.log", r, stop_at, written))
        for r in range(RANKS)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    total = sum(written)
    with urllib.request.urlopen(f"http://127.0.0.1:{web}/healthz", timeout=5) as answer:
        assert answer.status == 200

    def metrics_text() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=5) as answer:
            return answer.read().decode()

    counted = f"fabricwatch_phases_calls_total {float(total)}"
    # The last reads: within a second on a quiet machine, longer on a loaded one.
    assert wait_for(lambda: counted in metrics_text(), 30), counted
    metrics = metrics_text()
    assert "fabricwatch_phases_read_duration_seconds_count" in metrics
    collector.send_signal(signal.SIGTERM)
    out, err = collector.communicate(timeout=30)
    assert collector.returncode == 0, err
    assert total >= RANKS * CALLS_PER_S * SECONDS * 0.5, written
    assert f"{total} collective calls and {RANKS} communicator inits" in out, (out, err)
    assert "8 rotations" in err and "0 not UTF-8" in err
    assert wait_for(lambda: len(phases.records) > 0, 20)
    time.sleep(1.0)
    got = [decode(r.value, Phase) for r in phases.stop()]
    assert {p.job for p in got} == {"llama-8b"} and {p.comm for p in got} == {"0xc0ffee"}
    assert {p.op for p in got} == {"AllReduce", "AllGather"}
    assert set().union(*(p.rank_hosts for p in got)) == set(range(RANKS))
    assert len(got) < total / 50, "coalesced: a few messages a second, not one per call"
    # a phase's bytes are what one rank handed NCCL over it: over all phases, about one rank's total
    # (phases split at slightly different calls per rank, so not exactly)
    one_rank = max(written) * 262144 * 4
    assert sum(p.bytes for p in got) == pytest.approx(one_rank, rel=0.05)
