"""`fabricwatch phases collect --broker` on a node: rank processes write NCCL logs as a job does
(INIT lines, then a thousand COLL lines a second each, every log rotated mid-run), and the
collector process follows them into fabric.phases on a real broker (Tansu) with no line lost; what
the topic holds of a simulated incast's job names it, its collective and its sending ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.attribution import Rank, incasts, reduce_rank, without_job
from helpers.paths import SCENARIOS
from helpers.streaming import Collector
from helpers.waiting import wait_for

from fabricwatch.cli.main import main
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.local.broker import free_port
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CommGraph, Phase, PhaseMessage, decode, phase_time
from fabricwatch.schemas.trace import TraceWriter

pytestmark = pytest.mark.processes
RANKS = 8
CALLS_PER_S = 1000
SECONDS = 3.0


def write_rank_log(path: Path, rank: Rank, stop_at: float, written: list[int], index: int) -> None:
    """One rank's NCCL log as a job writes it: its INIT lines, then ``call(n)`` for n = 0, 1, ...,
    CALLS_PER_S a second until ``stop_at`` (or until ``call`` says None), the file rotated (renamed,
    a new one begun) halfway through SECONDS."""
    head, call = rank
    out = open(path, "a", buffering=1)  # noqa: SIM115 (rotated below)
    out.writelines(line + "\n" for line in head)
    n, rotated, start = 0, False, time.monotonic()
    while time.monotonic() < stop_at:
        if not rotated and time.monotonic() - start > SECONDS / 2:
            out.close()
            os.rename(path, f"{path}.1")
            out = open(path, "a", buffering=1)  # noqa: SIM115
            rotated = True
        line = call(n)
        if line is None:
            break
        out.write(line + "\n")
        n += 1
        time.sleep(max(0.0, start + n / CALLS_PER_S - time.monotonic()))
    out.close()
    written[index] = n


def training_rank(rank: int) -> Rank:
    """A data-parallel rank: its init, then AllReduce and AllGather calls alternating in bursts."""
    pid, host = 4000 + rank, f"gpu{rank // 4}"
    head = [
        f"{host}:{pid}:{pid} [{rank % 4}] NCCL INFO comm 0x{rank:x}00 rank {rank} nranks {RANKS} "
        f"cudaDev {rank % 4} busId 1000 commId 0xc0ffee - Init COMPLETE"
    ]

    def call(n: int) -> str:
        op = "AllReduce" if (n // 100) % 2 == 0 else "AllGather"
        return (
            f"{host}:{pid}:{pid + 1} [{rank % 4}] NCCL INFO {op}: opCount {n:x} sendbuff 0x1 recvbuff 0x2 "
            f"count 262144 datatype 7 op 0 root 0 comm 0x{rank:x}00 [nranks={RANKS}] stream 0x9"
        )

    return head, call


def start_collector(broker, logs: Path, job: str) -> tuple[subprocess.Popen, int]:
    argv = ["phases", "collect", "--job", job, "--log", str(logs / "*.log"), "--broker", broker.bootstrap]
    web = free_port()
    collector = subprocess.Popen(
        [*fabricwatch_command(), *argv, "--interval", "0.1", "--web-port", str(web)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    # Once it serves /metrics it follows the (empty) directory: every rank file will be new to it.
    assert wait_for(lambda: _answers(web), 30), collector.stderr
    return collector, web


def _answers(web: int) -> bool:
    try:
        return bool(metrics_text(web))
    except OSError:
        return False


def run_ranks(logs: Path, ranks: list[Rank]) -> list[int]:
    """Every rank's writer in its own thread, for SECONDS; the calls each wrote."""
    written = [0] * len(ranks)
    stop_at = time.monotonic() + SECONDS
    writers = [
        threading.Thread(target=write_rank_log, args=(logs / f"rank{r}.log", rank, stop_at, written, r))
        for r, rank in enumerate(ranks)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    return written


def metrics_text(web: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=5) as answer:
        return answer.read().decode()


def test_eight_ranks_logs_reach_fabric_phases_with_no_line_lost(broker, tmp_path):
    logs = tmp_path / "nccl"
    logs.mkdir()
    phases = Collector(broker, topics.PHASES)
    collector, web = start_collector(broker, logs, "llama-8b")
    written = run_ranks(logs, [training_rank(r) for r in range(RANKS)])
    total = sum(written)
    with urllib.request.urlopen(f"http://127.0.0.1:{web}/healthz", timeout=5) as answer:
        assert answer.status == 200
    counted = f"fabricwatch_phases_calls_total {float(total)}"
    # The last reads: within a second on a quiet machine, longer on a loaded one.
    assert wait_for(lambda: counted in metrics_text(web), 30), counted
    assert "fabricwatch_phases_read_duration_seconds_count" in metrics_text(web)
    collector.send_signal(signal.SIGTERM)
    out, err = collector.communicate(timeout=30)
    assert collector.returncode == 0, err
    assert total >= RANKS * CALLS_PER_S * SECONDS * 0.5, written
    assert f"{total} collective calls and {RANKS} communicator inits" in out, (out, err)
    assert "8 rotations" in err and "0 not UTF-8" in err
    assert wait_for(lambda: len(phases.records) > 0, 20) and phases.caught_up()
    got = [m for r in phases.stop() if isinstance(m := decode(r.value, PhaseMessage), Phase)]
    got = [p for p in got if p.job == "llama-8b"]
    assert {p.comm for p in got} == {"0xc0ffee"}
    assert {p.op for p in got} == {"AllReduce", "AllGather"}
    assert set().union(*(p.rank_hosts for p in got)) == set(range(RANKS))
    assert len(got) < total / 50, "coalesced: a few messages a second, not one per call"
    # a phase's bytes are what one rank handed NCCL over it: over all phases, about one rank's total
    # (phases split at slightly different calls per rank, so not exactly)
    one_rank = max(written) * 262144 * 4
    assert sum(p.bytes for p in got) == pytest.approx(one_rank, rel=0.05)


def test_a_job_s_logs_through_the_broker_name_it_and_its_senders_in_a_simulated_incast(
    broker, tmp_path, capsys
):
    """The simulated incast's job, its own phases taken out of the trace, logs as NCCL does (INIT
    lines and Reduce calls, rotated mid-run); the collector follows the logs into fabric.phases on
    the broker, and what the topic holds, replayed beside the counters, names the job, its Reduce
    and the receiver's ring neighbours as the senders."""
    start = (time.time_ns() // 10**9 - 3600) * 10**9
    full, counters = tmp_path / "incast.trace", tmp_path / "counters.trace"
    simulate(load_scenario(SCENARIOS / "incast.yaml", {"duration": 50, "start_time": start}), full)
    simulated = without_job(full, counters, "moe-b")
    hosts = simulated.participants()
    logs = tmp_path / "nccl"
    logs.mkdir()
    topic = Collector(broker, topics.PHASES)
    collector, web = start_collector(broker, logs, "moe-live")
    calls = int(CALLS_PER_S * SECONDS * 0.8)  # each rank done before SECONDS are up
    written = run_ranks(logs, [reduce_rank(r, hosts, simulated, calls) for r in range(len(hosts))])
    counted = f"fabricwatch_phases_calls_total {float(sum(written))}"
    assert wait_for(lambda: counted in metrics_text(web), 30), counted
    collector.send_signal(signal.SIGTERM)
    _, err = collector.communicate(timeout=30)
    assert collector.returncode == 0, err
    assert f"{len(hosts)} rotations" in err, err
    assert wait_for(lambda: any(b"moe-live" in r.value for r in topic.records), 20) and topic.caught_up()
    got = [m for r in topic.stop() if (m := decode(r.value, PhaseMessage)).job == "moe-live"]
    graphs = [m for m in got if isinstance(m, CommGraph)]
    assert {g.host for g in graphs} == set(hosts) and sum(len(g.edges) for g in graphs) == 4 * len(hosts)
    live = tmp_path / "live.trace"
    with TraceWriter(live, "test", 0, {}) as w:
        for m in got:
            w.write_message(topics.PHASES, m.job, phase_time(m), m)
    capsys.readouterr()
    assert main(["replay", str(counters), "--with", str(live), "--json"]) == 0
    (incast,) = incasts(capsys)
    assert incast["jobs"][0] == "moe-live", incast["jobs"]
    assert any(c.startswith("Reduce comm 0x5eed") for c in incast["collectives"]), incast["collectives"]
    root, n = hosts.index("h010"), len(hosts)
    assert incast["evidence"]["sending_ranks"] == ", ".join(
        map(str, sorted({(root - 1) % n, (root + 1) % n}))
    )
