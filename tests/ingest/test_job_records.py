"""Issue 35, item 7: every record of a job is read with its own time, or refused with its reason.

Found by a new user: an 8-rank job's Inspector records imported as phases whose source said
``nccl-log``, coalesced into one phase spanning the whole run for a pair of ranks (each rank's file
read after the other's), and a summary counting 2,000 "communicator inits" in "0 lines"; an
nccl-tests output, the NCCL profiler plugin's trace (as a JSON array and as lines) refused without
a reason or with the wrong one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.job_records import flight_recorder_dump, flight_recorder_json
from helpers.paths import FIXTURES

from fabricwatch.cli.main import main
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.job_stage import EXPLAIN_WAIT_NS, JobStage
from fabricwatch.ingest.phases.formats import FormatError, detect, records
from fabricwatch.ingest.phases.steps import StepMark
from fabricwatch.schemas.messages import Collectives, Phase, PhaseMessage, Steps, decode
from fabricwatch.schemas.trace import TraceReader

S = 1_000_000_000
START_US = 1_748_030_377_000_000
"""The README example's dump time, rounded: the job's records are placed near it."""


def inspector_job(
    directory: Path, ranks: int = 8, every_s: float = 0.5, duration_s: float = 124.5
) -> list[Path]:
    """The Inspector's output of a job (a file per process, one compact record per line, as
    ``inspector_plugin.cc`` writes it), shaped as the README's example record: one 1 GiB AllReduce
    every ``every_s`` on every rank, rank r's taking 60 ms + r x 100 µs."""
    example = json.loads((FIXTURES / "nccl_inspector_output_readme_example.json").read_text())
    files = []
    calls = int(duration_s / every_s) + 1
    for rank in range(ranks):
        host = f"gpu{rank // 4}"
        lines = []
        for sn in range(calls):
            rec = json.loads(json.dumps(example))
            rec["header"].update(id="0x7f8c496ae9f661", rank=rank, n_ranks=ranks, nnodes=2)
            exec_us = 60_000 + rank * 100
            rec["metadata"].update(
                hostname=host, pid=1000 + rank, dump_timestamp_us=START_US + int(sn * every_s * 1e6) + exec_us
            )
            rec["coll_perf"].update(coll_sn=sn, coll_msg_size_bytes=1 << 30, coll_exec_time_us=exec_us)
            lines.append(json.dumps(rec, separators=(",", ":")))
        path = directory / f"{host}-pid{1000 + rank}.log"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files


def imported(tmp_path: Path, files: list[Path], *extra: str) -> list[PhaseMessage]:
    out = tmp_path / "job.trace"
    assert main(["phases", "import", "--job", "llm-a", "--out", str(out), *extra, *map(str, files)]) == 0
    with TraceReader(out) as reader:
        return [decode(r.value(), PhaseMessage) for r in reader]  # type: ignore[arg-type]


def test_an_inspector_job_keeps_each_records_time_and_phases_stay_a_run_long(tmp_path, capsys):
    files = inspector_job(tmp_path)
    messages = imported(tmp_path, files)
    phases = [m for m in messages if isinstance(m, Phase)]
    timed = [m for m in messages if isinstance(m, Collectives)]
    assert {p.source for p in phases} == {"inspector"}
    assert max(p.end_ns - p.begin_ns for p in phases) <= 1 * S, "a phase is a run of calls, not the job"
    assert min(p.begin_ns for p in phases) == START_US * 1000 and len({p.begin_ns for p in phases}) > 100
    assert all(p.rank_hosts == {r: f"gpu{r // 4}" for r in range(8)} for p in phases[1:-1])
    calls = [c for m in timed for c in m.calls]
    assert len(calls) == 8 * 250 and {m.source for m in timed} == {"inspector"}
    assert {(m.comm, m.nranks, m.upper_bound) for m in timed} == {("0x7f8c496ae9f661", 8, False)}
    first = min(calls, key=lambda c: (c.begin_ns, c.rank))
    assert (first.op, first.rank, first.bytes, first.dur_ns) == ("AllReduce", 0, 1 << 30, 60_000_000)
    assert first.begin_ns == START_US * 1000
    assert sorted(c.dur_ns for c in calls if c.rank == 7) == [60_700_000] * 250
    assert all(m.calls == sorted(m.calls, key=lambda c: c.begin_ns) for m in timed)
    said = capsys.readouterr().out
    assert "2000 collective calls in profilers' records made" in said and "2000 timed calls" in said
    assert "communicator inits" not in said, "records are not log lines"


def test_the_flight_recorder_says_its_durations_are_an_upper_bound(tmp_path):
    src = tmp_path / "fr.json"
    src.write_text(flight_recorder_json())
    (timed,) = [m for m in imported(tmp_path, [src], "--host", "gpu1") if isinstance(m, Collectives)]
    assert timed.upper_bound and timed.source == "flight-recorder"
    (call,) = timed.calls
    assert call.dur_ns == 1724779239975811724 - 1724779239936775119, "created to completed"


def test_an_nccl_log_gives_phases_and_no_made_up_durations(tmp_path):
    """Its real COLL lines, stamped as NCCL_DEBUG_TIMESTAMP_LEVELS=INFO stamps them."""
    coll = (FIXTURES / "nccl_coll_tp_allgather_reducescatter_2rank.log").read_text().splitlines()
    log = tmp_path / "llm-a" / "hopper01.log"
    log.parent.mkdir()
    log.write_text("\n".join(f"[2025-05-01 10:00:0{i}] {line}" for i, line in enumerate(coll)) + "\n")
    messages = imported(tmp_path, [log])
    assert [m for m in messages if isinstance(m, Phase)]
    assert not [m for m in messages if isinstance(m, Collectives)], "a log line says when, not how long"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "nccl_tests_gather_perf_roce_ib_init_and_table.log",
            "an nccl-tests run of gather_perf, 2 ranks on 2 hosts (n013, n014)",
        ),
        (
            "nccl_tests_all_reduce_16rank_2node_h100_a3mega.log",
            "16 ranks on 2 hosts (ztan-mig-235z, ztan-mig-gq73): 31 sizes from 8 to 8589934592 "
            "bytes, bus bandwidth up to 338.82 GB/s",
        ),
    ],
)
def test_an_nccl_tests_output_is_refused_by_name_saying_what_it_measured(tmp_path, capsys, name, expected):
    text = (FIXTURES / name).read_text()
    assert detect(text) == "nccl-tests"
    src = tmp_path / name
    src.write_text(text)
    assert main(["phases", "import", "--job", "j", "--out", str(tmp_path / "t"), str(src)]) == 1
    err = capsys.readouterr().err
    assert expected in err and "a benchmark's table has no time per row" in err


def profiler_trace_lines() -> str:
    """The NCCL example profiler plugin's README trace, its events one per line without the array
    brackets (as the README shows them)."""
    lines = (FIXTURES / "nccl_profiler_example_plugin_readme_trace.json").read_text().splitlines()
    return "\n".join(line for line in lines if line.startswith("{") and line != "{}]")


@pytest.mark.parametrize("shape", ["array", "lines"])
def test_the_nccl_profiler_plugins_trace_is_refused_by_name_with_why(tmp_path, capsys, shape):
    text = (FIXTURES / "nccl_profiler_example_plugin_readme_trace.json").read_text()
    text = text if shape == "array" else profiler_trace_lines()
    assert detect(text) == "nccl-profiler"
    with pytest.raises(FormatError, match="not the wall clock"):
        list(records("nccl-profiler", text, None, []))
    src = tmp_path / "prof.json"
    src.write_text(text)
    assert main(["phases", "import", "--job", "j", "--out", str(tmp_path / "t"), str(src)]) == 1
    err = capsys.readouterr().err
    assert "NCCL's example profiler plugin" in err and "Inspector record" not in err


def test_json_of_another_shape_names_what_it_holds():
    with pytest.raises(FormatError, match="keys alpha, beta"):
        detect('{"alpha": 1, "beta": 2}')
    with pytest.raises(FormatError, match="JSON lines of a JSON object with keys name, ts"):
        detect('{"name": "x", "ts": 1}\n{"name": "y", "ts": 2}\n')
    with pytest.raises(FormatError, match="JSON array of 2 items"):
        detect("[{}, {}]")


def test_one_bad_inspector_record_costs_only_itself(tmp_path, capsys):
    (path,) = inspector_job(tmp_path, ranks=1, duration_s=1.0)
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["metadata"]["pid"]
    p2p = {"header": broken["header"], "metadata": broken["metadata"], "p2p_perf": {"p2p": "Send"}}
    path.write_text("\n".join([lines[0], json.dumps(broken), json.dumps(p2p), lines[2]]) + "\n")
    messages = imported(tmp_path, [path])
    calls = [c for m in messages if isinstance(m, Collectives) for c in m.calls]
    assert len(calls) == 2, "the two good records"
    err = capsys.readouterr().err
    assert "without a readable 'pid'" in err and "p2p_perf record: point-to-point" in err


def test_a_kineto_traces_steps_say_their_time_and_how_much_of_it_went_to_collectives(tmp_path, capsys):
    """A real trace's three training steps (HolisticTraceAnalysis' DDP trace on A100s, its NCCL and
    a few compute kernels: tests/fixtures/SOURCES.md). Hand-computed from the fixture: each step's
    time is its ProfilerStep's; its seven NCCL kernels run one after another, so its time in
    collectives is their sum; in steps 5 and 6 a batch-norm kernel runs under an AllReduce (17.664
    and 57.888 µs), so that much of the communication is hidden behind compute."""
    src = FIXTURES / "kineto_trace_profilerstep_nccl_a100_ddp_3steps_hta.json"
    got = imported(tmp_path, [src], "--host", "gpu0")
    assert "21 timed calls, 3 steps" in capsys.readouterr().out
    (steps,) = [m for m in got if isinstance(m, Steps)]
    assert steps.job == "llm-a" and steps.source == "kineto" and steps.rank_hosts == {0: "gpu0"}
    base_ns = 1711964646000000000
    expected = [  # step, begin µs, time µs, in collectives µs, hidden µs
        (4, 4458676416788.066, 222442.191, 11989.021, 0.0),
        (5, 4458676639291.351, 219726.905, 12300.029, 17.664),
        (6, 4458676859077.781, 224936.243, 22587.443, 57.888),
    ]
    assert [s.step for s in steps.steps] == [4, 5, 6]
    for s, (n, begin_us, dur_us, coll_us, hidden_us) in zip(steps.steps, expected, strict=True):
        assert s.rank == 0 and s.begin_ns == pytest.approx(base_ns + begin_us * 1000, abs=2), n
        assert s.dur_ns == pytest.approx(dur_us * 1000, abs=2), n
        assert s.coll_ns == pytest.approx(coll_us * 1000, abs=2), n
        assert s.exposed_ns == pytest.approx((coll_us - hidden_us) * 1000, abs=2), n
    # the share of step 6 in collectives, as a job's owner reads it: 10 %, none of it hidden to speak of
    assert steps.steps[2].coll_ns / steps.steps[2].dur_ns == pytest.approx(0.1004, abs=1e-4)


def test_steps_without_kernels_in_the_trace_have_their_time_and_no_made_up_share():
    """A CPU-only profile marks its steps but times no kernel: the time in collectives is
    unknown (None), not zero."""
    doc = {
        "baseTimeNanoseconds": 1711964646000000000,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "ts": 1000 + n * 500,
                "dur": 480,
            }
            for n in range(3)
        ],
    }
    marks = [r for r in records("kineto", json.dumps(doc), "cpu0", []) if isinstance(r, StepMark)]
    assert [(m.step, m.dur_ns, m.coll_ns, m.exposed_ns) for m in marks] == [
        (n, 480_000, None, None) for n in range(3)
    ]


def test_a_hung_collective_names_the_rank_that_never_entered_it(tmp_path, capsys):
    """The tutorial's hang, as torchfrtrace reports it ("Not all ranks joining collective 9 ...
    missing ranks: {1}"): rank 0 entered AllReduce #9 and is still in it; rank 1's dump ends at #8.
    Imported, the job stage's hang names rank 1 and its host, not only the silence."""
    paths = []
    for rank, scheduled in ((0, 9), (1, None)):
        path = tmp_path / f"fr-rank{rank}.json"
        path.write_text(flight_recorder_dump(rank, completed=8, scheduled=scheduled))
        paths.append(path)
    got = imported(tmp_path, paths, "--host", "gpu1")
    assert "17 timed calls (1 entered and not completed)" in capsys.readouterr().out
    calls = [c for m in got if isinstance(m, Collectives) for c in m.calls]
    (entered,) = [c for c in calls if not c.completed]
    assert (entered.rank, entered.seq, entered.dur_ns) == (0, 9, 0)
    stage = JobStage(DetectorConfig())
    for m in got:
        if isinstance(m, Collectives):
            stage.on_collectives(m)
        elif isinstance(m, Phase):
            stage.on_phase(m)
    after = max(c.begin_ns for c in calls) + 15 * S
    events = stage.evaluate(after) + stage.evaluate(after + EXPLAIN_WAIT_NS)  # nothing explains it
    (hang,) = [a for a in events if a.status == "firing"]
    assert hang.kind == "job_hang"
    assert "rank 1 on gpu1 never entered AllReduce #9, which rank 0 entered" in hang.summary
    assert hang.evidence["missing_ranks"] == "1" and hang.evidence["entered_ranks"] == "0"


def test_a_step_marked_on_the_gpu_is_the_one_its_kernels_are_measured_in():
    """Where the trace marks a step on the GPU's timeline too, that is the step (its kernels run
    there; the CPU's annotation leads it by the launch queue): an NCCL kernel after the CPU's step
    ended but inside the GPU's counts in it."""
    step = {"ph": "X", "name": "ProfilerStep#3"}
    kernel = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    doc = {
        "baseTimeNanoseconds": 1711964646000000000,
        "traceEvents": [
            {**step, "cat": "user_annotation", "ts": 0, "dur": 1000},
            {**step, "cat": "gpu_user_annotation", "ts": 400, "dur": 1000},
            {**kernel, "ts": 1100, "dur": 200},
        ],
    }
    (mark,) = [r for r in records("kineto", json.dumps(doc), "gpu0", []) if isinstance(r, StepMark)]
    assert (mark.begin_ns - 1711964646000000000, mark.dur_ns, mark.coll_ns, mark.exposed_ns) == (
        400_000,
        1_000_000,
        200_000,
        200_000,
    )
