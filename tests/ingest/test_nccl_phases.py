"""Collective phases from NCCL logs: real COLL and INIT lines (torchtitan#1369, nccl-tests#350),
the prefixes launchers and NCCL's own timestamps add, coalescing calls into phases across a node's
ranks, bad lines costing only themselves, and following files through rotation and truncation."""

from __future__ import annotations

import os

import pytest
from helpers.paths import FIXTURES

from fabricwatch.cli.main import main
from fabricwatch.ingest.phases.coalescer import PhaseCoalescer
from fabricwatch.ingest.phases.log_tail import LogTail
from fabricwatch.ingest.phases.nccl_log import CollCall, CommInit, LineError, parse_line, scan
from fabricwatch.ingest.phases.nccl_phases import NcclPhaseReader
from fabricwatch.schemas.messages import Phase, decode
from fabricwatch.schemas.trace import TraceReader

COLL_LOG = (FIXTURES / "nccl_coll_tp_allgather_reducescatter_2rank.log").read_text()
INIT_LOG = (FIXTURES / "nccl_tests_gather_perf_roce_ib_init_and_table.log").read_text()
MS = 10**6
COLL = COLL_LOG.splitlines()[0]
"""hopper01:191370:191425 [1] NCCL INFO AllGather: opCount d ... count 2097152 datatype 7 ..."""


def test_the_real_coll_lines_read_exactly():
    calls = [parse_line(line) for line in COLL_LOG.splitlines()]
    assert all(isinstance(c, CollCall) for c in calls)
    ops = ["AllGather", "ReduceScatter", "AllGather", "ReduceScatter", "AllGather", "AllReduce", "AllReduce"]
    assert [c.op for c in calls] == ops
    first = calls[0]
    assert (first.host, first.pid, first.comm, first.nranks) == ("hopper01", 191370, "0x55fca23fc0f0", 2)
    assert first.bytes == 2097152 * 4, "count 2097152 of datatype 7 (float32)"
    assert calls[-1].bytes == 4 and first.ts_ns is None


def test_a_scan_folds_a_run_of_calls_with_their_bytes_whether_their_sizes_agree_or_not():
    """The real AllGather line repeated as a training loop repeats it: the same size three times,
    then sizes that differ (a last, smaller bucket); each run is one call of its summed bytes."""
    same = COLL + "\n" + COLL + "\n" + COLL + "\n"
    mixed = same + COLL.replace("count 2097152", "count 1024") + "\n"
    (run,) = scan(same).calls
    assert (run.n, run.bytes) == (3, 3 * 2097152 * 4)
    (run,) = scan(mixed).calls
    assert (run.n, run.bytes) == (4, (3 * 2097152 + 1024) * 4)


def test_a_scan_of_interleaved_collectives_gives_one_call_per_collective_and_time_as_lines_do():
    """The real log interleaves two ranks' AllGather and ReduceScatter as tensor parallelism does,
    layer by layer: the scan folds each process's calls of a collective (not only consecutive
    ones: rank 1's two AllGathers have a ReduceScatter between them) and loses no byte; lines with
    their own, different times stay apart."""
    by_line: dict[tuple, list[int]] = {}
    for c in map(parse_line, COLL_LOG.splitlines()):
        by_line.setdefault((c.host, c.pid, c.comm, c.op, c.ts_ns), []).append(c.bytes)
    scanned = scan(COLL_LOG)
    assert [(c.pid, c.op, c.n) for c in scanned.calls] == [
        (191370, "AllGather", 2),
        (191369, "ReduceScatter", 1),
        (191369, "AllGather", 1),
        (191370, "ReduceScatter", 1),
        (191369, "AllReduce", 2),
    ]
    assert {(c.host, c.pid, c.comm, c.op, c.ts_ns): c.bytes for c in scanned.calls} == {
        key: sum(sizes) for key, sizes in by_line.items()
    }
    assert (scanned.lines, scanned.kept) == (7, 7)
    timed = "\n".join(f"[2025-03-01 10:00:0{s}] {COLL}" for s in (0, 1, 0)) + "\n"
    assert [(c.ts_ns - scan(timed).calls[0].ts_ns, c.n) for c in scan(timed).calls] == [(0, 2), (10**9, 1)]


def test_the_real_init_log_gives_the_communicator_and_nothing_else_is_mistaken():
    parsed = [parse_line(line) for line in INIT_LOG.splitlines()]
    ours = [p for p in parsed if p is not None]
    assert [p for p in ours if isinstance(p, CommInit)] == [
        CommInit("n013", 101855, "0x72a6b00", 0, 2, "0xb2f794396f6d0bd1", tid=101885)
    ]
    assert [type(p).__name__ for p in ours].count("Connection") == 6, "the six `via NET/IB/1` lines"
    assert len(ours) == 8, "and the NIC list: nothing else in the log is taken for ours"


@pytest.mark.parametrize(
    "prefix",
    ["", "[1,1]<stdout>:", "1: ", "[default1]:", "(RayTrainWorker pid=191370, ip=10.0.0.7) "],
    ids=["bare", "mpirun", "srun", "torchrun", "ray"],
)
def test_launcher_prefixes_and_nccl_timestamps(prefix):
    bare = parse_line(COLL)
    assert parse_line(prefix + COLL) == bare
    stamped = parse_line(f"{prefix}[2026-11-25 10:00:01] {COLL}")
    assert stamped is not None and stamped.ts_ns is not None
    later = parse_line(f"{prefix}[2026-11-25 10:00:02.250] {COLL}")
    assert later.ts_ns - stamped.ts_ns == 1250 * MS
    assert stamped == bare._replace(ts_ns=stamped.ts_ns)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (COLL[:150], "cut short"),
        (COLL.replace("datatype 7", "datatype 42"), "datatype 42"),
        (COLL.replace("AllGather:", "AllGatherV:"), "'AllGatherV'"),
        (COLL.replace("Init COMPLETE", "").replace("opCount", "opCount") + "", None),
    ],
)
def test_lines_that_cannot_be_read_are_errors(line, why):
    if why is None:
        assert isinstance(parse_line(line), CollCall)
        return
    with pytest.raises(LineError, match=why):
        parse_line(line)


def calls_of(host: str, pid: int, comm: str, op: str, n: int, t0_ns: int, step_ns: int) -> list[str]:
    """``n`` COLL lines of one rank at ``step_ns`` apart, with NCCL's timestamp in ms."""
    out = []
    for i in range(n):
        t = t0_ns + i * step_ns
        stamp = f"[2026-11-25 10:00:{t // 10**9:02d}.{t % 10**9 // MS:03d}]"
        out.append(
            f"{stamp} {host}:{pid}:{pid + 1} [0] NCCL INFO {op}: opCount {i:x} sendbuff 0x1 recvbuff 0x2 "
            f"count 1024 datatype 9 op 0 root 0 comm {comm} [nranks=16] stream 0x3"
        )
    return out


def test_a_node_s_ranks_make_one_phase_per_run_of_one_collective():
    """Two ranks of one node (their comm pointers differ, their commId is the same) each call
    AllReduce 500 times 1 ms apart, then AllGather: two phases, not 2,000 messages."""
    said: list[str] = []
    reader = NcclPhaseReader(PhaseCoalescer("llama-70b", gap_s=0.5), said.append, stamp_untimed=False)
    init = "gpu7:{pid}:{pid} [0] NCCL INFO comm {comm} rank {rank} nranks 16 cudaDev 0 busId 1000 "
    init += "commId 0xfeed - Init COMPLETE"
    lines = [init.format(pid=100, comm="0xa", rank=4), init.format(pid=200, comm="0xb", rank=5)]
    for pid, comm in ((100, "0xa"), (200, "0xb")):
        lines += calls_of("gpu7", pid, comm, "AllReduce", 500, 0, MS)
    for pid, comm in ((100, "0xa"), (200, "0xb")):
        lines += calls_of("gpu7", pid, comm, "AllGather", 10, 600 * MS, MS)
    phases = [ph for line in lines for ph in reader.line(line)] + reader.close_all()
    assert [(p.op, p.comm, p.rank_hosts) for p in phases] == [
        ("AllReduce", "0xfeed", {4: "gpu7", 5: "gpu7"}),
        ("AllGather", "0xfeed", {4: "gpu7", 5: "gpu7"}),
    ]
    reduce = phases[0]
    assert reduce.end_ns - reduce.begin_ns == 499 * MS and reduce.bytes == 500 * 1024 * 2
    assert said == []


def test_bad_lines_cost_only_themselves_and_are_said_once_per_kind():
    said: list[str] = []
    reader = NcclPhaseReader(PhaseCoalescer("j"), said.append)
    lines = [COLL[:150], COLL[:140], COLL.replace("datatype 7", "datatype 42"), COLL, "x\ufffdy " + COLL]
    phases = [ph for line in lines for ph in reader.line(line, 5 * MS)] + reader.close_all()
    assert reader.stats.problems == {
        "a COLL line of an unknown layout or cut short": 2,
        "datatype 42 is not one NCCL defines": 1,
        "not UTF-8": 1,
    }
    assert len(said) == 3 and reader.stats.calls == 2
    assert len(phases) == 1 and phases[0].op == "AllGather"


def test_import_takes_timed_lines_and_says_how_to_get_them(tmp_path, capsys):
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(calls_of("gpu7", 100, "0xa", "ReduceScatter", 20, 0, 2 * MS)) + "\n")
    out = tmp_path / "phases.trace"
    assert main(["phases", "import", "--job", "mixtral", "--out", str(out), str(log)]) == 0
    with TraceReader(out) as reader:
        (phase,) = [decode(r.value(), Phase) for r in reader]
    assert (phase.job, phase.op, phase.hosts, phase.end_ns - phase.begin_ns) == (
        "mixtral",
        "ReduceScatter",
        ["gpu7"],
        38 * MS,
    )
    untimed = tmp_path / "untimed.log"
    untimed.write_text(COLL_LOG)
    assert main(["phases", "import", "--job", "mixtral", "--out", str(out), str(untimed)]) == 1
    assert "NCCL_DEBUG_TIMESTAMP_LEVELS=INFO" in capsys.readouterr().err


def test_the_tail_follows_rotation_truncation_partial_lines_and_new_files(tmp_path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text("before start\n")
    with LogTail([str(tmp_path / "rank*.log")]) as tail:
        assert list(tail.read()) == []  # present at start: followed from its end
        with open(a, "a") as f:
            f.write("one\ntwo\npart")
        b.write_text("b1\n")  # a rank file that appears later: from its start
        assert sorted(t for _, t in tail.read()) == ["b1", "one", "two"]
        with open(a, "a") as f:
            f.write("ial\nlast of old\n")
        os.rename(a, tmp_path / "rank0.log.1")  # rotation: the old file is read to its end
        a.write_text("first of new\n")
        assert [t for p, t in tail.read() if p == str(a)] == ["partial", "last of old", "first of new"]
        b.write_text("")  # truncated in place
        with open(b, "a") as f:
            f.write("b again\n")
        assert [t for _, t in tail.read()] == ["b again"]
        b.unlink()
        assert list(tail.read()) == []
        with open(a, "ab") as f:
            f.write(b"caf\xe9\n")
        assert [t for _, t in tail.read()] == ["caf\ufffd"]
        s = tail.stats
        assert (s.rotations, s.truncations, s.vanished, s.not_utf8, s.lines) == (1, 1, 1, 1, 8)


def test_ranks_read_one_file_after_another_still_make_one_phase_per_collective():
    """A live read takes each rank's new lines file by file: rank 4's AllReduce and AllGather, then
    rank 5's. The collectives overlap in time; each keeps one phase."""
    reader = NcclPhaseReader(PhaseCoalescer("j", gap_s=0.5), stamp_untimed=False)
    lines = []
    for pid, comm in ((100, "0xa"), (200, "0xb")):
        lines += calls_of("gpu7", pid, comm, "AllReduce", 50, 0, 2 * MS)
        lines += calls_of("gpu7", pid, comm, "AllGather", 50, MS, 2 * MS)
    phases = [ph for line in lines for ph in reader.line(line)] + reader.close_all()
    assert sorted((p.op, p.comm) for p in phases) == [
        ("AllGather", "gpu7:100:0xa"),
        ("AllGather", "gpu7:200:0xb"),
        ("AllReduce", "gpu7:100:0xa"),
        ("AllReduce", "gpu7:200:0xb"),
    ]


def test_a_job_that_never_pauses_still_reports_every_second():
    reader = NcclPhaseReader(PhaseCoalescer("j", gap_s=0.5, max_s=1.0), stamp_untimed=False)
    lines = calls_of("gpu7", 100, "0xa", "AllReduce", 3000, 0, MS)  # 3 s of calls, 1 ms apart
    phases = [ph for line in lines for ph in reader.line(line)] + reader.close_all()
    t0 = phases[0].begin_ns
    assert [((p.begin_ns - t0) // MS, (p.end_ns - t0) // MS) for p in phases] == [
        (0, 999),
        (1000, 1999),
        (2000, 2999),
    ]


@pytest.mark.parametrize("timed", [True, False])
def test_a_read_of_many_lines_gives_the_phases_line_by_line_reading_gives(timed):
    """``chunk`` scans a whole read at once and folds runs of one process's calls; the phases,
    bytes and call counts are those of reading the same lines one by one."""
    lines = []
    for pid, comm in ((100, "0xa"), (200, "0xb")):
        for step in range(3):
            lines += calls_of("gpu7", pid, comm, "AllReduce", 40, step * 300 * MS, MS)
            lines += calls_of("gpu7", pid, comm, "AllGather", 40, step * 300 * MS + 100 * MS, MS)
    if not timed:
        lines = [line.split("] ", 1)[1] for line in lines]
    text = "\n".join(lines) + "\n"

    def run(feed) -> tuple[list, NcclPhaseReader]:
        reader = NcclPhaseReader(PhaseCoalescer("j", gap_s=0.15), stamp_untimed=True)
        return feed(reader) + reader.close_all(), reader

    by_chunk, chunked = run(lambda r: r.chunk(text, 7 * MS))
    by_line, lined = run(lambda r: [ph for line in lines for ph in r.line(line, 7 * MS)])
    assert sorted(map(repr, by_chunk)) == sorted(map(repr, by_line))
    assert (chunked.stats.calls, chunked.stats.lines) == (lined.stats.calls, lined.stats.lines) == (480, 480)
    assert len(by_chunk) == (12 if timed else 4), "timed: three steps apart; untimed: one read, one time"


def test_without_a_job_name_each_log_s_directory_names_its_job(tmp_path):
    """One node, two jobs: NCCL_DEBUG_FILE=/var/log/nccl/<job>/%h.%p.log names each."""
    for job, op in (("llama-70b", "AllReduce"), ("mixtral", "AllToAll")):
        (tmp_path / job).mkdir()
        lines = calls_of("gpu7", 100, "0xa", op.replace("AllToAll", "AlltoAll"), 10, 0, MS)
        (tmp_path / job / "gpu7.100.log").write_text("\n".join(lines) + "\n")
    out = tmp_path / "phases.trace"
    assert main(["phases", "import", "--out", str(out), *map(str, tmp_path.glob("*/*.log"))]) == 0
    with TraceReader(out) as reader:
        phases = [decode(r.value(), Phase) for r in reader]
    assert sorted((p.job, p.op) for p in phases) == [("llama-70b", "AllReduce"), ("mixtral", "AllToAll")]
