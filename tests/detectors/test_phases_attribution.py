"""A real job's NCCL logs name the job behind an incident: a simulated incast whose job's own
phases are taken out of the trace is attributed to nobody's collective; the same job's ranks
logging their Reduce calls as NCCL does (INIT lines, COLL lines with NCCL's default timestamp),
imported with `phases import` and replayed with `replay --with`, name the job and the collective."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.attribution import incasts, reduce_rank, without_job
from helpers.paths import SCENARIOS

from fabricwatch.cli.main import main
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas.messages import Phase

pytestmark = pytest.mark.slow  # whole scenarios replayed


def ring_neighbours(hosts: list[str], receiver: str) -> str:
    """The ranks that send into the receiver's rank on the two rings, as the evidence lists them."""
    root, n = hosts.index(receiver), len(hosts)
    return ", ".join(map(str, sorted({(root - 1) % n, (root + 1) % n})))


def nccl_logs(folder: Path, phase: Phase) -> list[Path]:
    """One log per rank of ``phase``'s hosts (``reduce_rank``), a Reduce every 20 ms."""
    hosts = phase.participants()
    calls = (phase.end_ns - phase.begin_ns) // 20_000_000
    paths = []
    for rank in range(len(hosts)):
        head, call = reduce_rank(rank, hosts, phase, calls)
        path = folder / f"{hosts[rank]}.{7000 + rank}.log"
        path.write_text("\n".join([*head, *(call(k) for k in range(calls))]) + "\n")
        paths.append(path)
    return paths


def test_a_job_s_nccl_logs_name_it_and_its_collective_in_the_incast(tmp_path, capsys):
    start = (time.time_ns() // 10**9 - 3600) * 10**9
    full = tmp_path / "incast.trace"
    simulate(load_scenario(SCENARIOS / "incast.yaml", {"duration": 50, "start_time": start}), full)
    counters = tmp_path / "counters.trace"
    simulated = without_job(full, counters, "moe-b")

    assert main(["replay", str(counters), "--json"]) == 0
    (before,) = incasts(capsys)
    assert before["jobs"] == ["llm-a"], "only the background AllReduce job is left to name"
    assert not any(c.startswith("Reduce ") for c in before["collectives"]), before["collectives"]

    logs = nccl_logs(tmp_path, simulated)
    phases = tmp_path / "phases.trace"
    assert main(["phases", "import", "--job", "moe-real", "--out", str(phases), *map(str, logs)]) == 0
    capsys.readouterr()
    assert main(["replay", str(counters), "--with", str(phases), "--json"]) == 0
    (after,) = incasts(capsys)
    assert after["jobs"][0] == "moe-real", after["jobs"]
    assert any(c.startswith("Reduce comm 0x5eed") for c in after["collectives"]), after["collectives"]
    assert after["root"] == before["root"], "the same incast, now named"
    assert after["evidence"]["sending_ranks"] == ring_neighbours(simulated.participants(), "h010")
    assert f"from ranks {after['evidence']['sending_ranks']}" in after["summary"]
