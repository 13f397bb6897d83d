"""`phases import` reads a job's other records of its collectives, told apart by content: the NCCL
Inspector's JSON output (its README's examples), PyTorch profiler (Kineto) traces assembled from
the real fragments of HolisticTraceAnalysis' test data, and a Flight Recorder dump (the PyTorch
tutorial's, in the JSON form the dump also has). Each gives the phase a hand count gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.job_records import flight_recorder_json
from helpers.paths import FIXTURES

from fabricwatch.cli.main import main
from fabricwatch.ingest.phases.formats import FormatError, detect, records
from fabricwatch.schemas.messages import Collectives, Phase, PhaseMessage, decode
from fabricwatch.schemas.trace import TraceReader


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def kineto(*fragments: str, **top: object) -> str:
    """A Kineto trace of real event fragments (each file a comma-ended run of events), with
    ``distributedInfo`` from its real line and what ``top`` adds."""
    events = json.loads("[" + ",".join(f.strip().rstrip(",") for f in fragments) + "]")
    info = json.loads(
        "{" + fixture("kineto_trace_distributedInfo_line_a100_hta.jsonfrag").strip().rstrip(",") + "}"
    )
    return json.dumps({**info, **top, "traceEvents": events})


def import_messages(tmp_path: Path, name: str, text: str, *extra: str) -> list[PhaseMessage]:
    src = tmp_path / name
    src.write_text(text)
    out = tmp_path / "phases.trace"
    assert main(["phases", "import", "--job", "bench", "--out", str(out), *extra, str(src)]) == 0
    with TraceReader(out) as reader:
        return [decode(r.value(), PhaseMessage) for r in reader]  # type: ignore[arg-type]


def import_phases(tmp_path: Path, name: str, text: str, *extra: str) -> list[Phase]:
    return [m for m in import_messages(tmp_path, name, text, *extra) if isinstance(m, Phase)]


def timed(messages: list[PhaseMessage]) -> list[Collectives]:
    return [m for m in messages if isinstance(m, Collectives)]


def test_the_inspector_json_examples(tmp_path):
    both = fixture("nccl_inspector_output_readme_example.json") + fixture(
        "nccl_inspector_output_verbose_readme_example.json"
    )
    assert detect(both) == "inspector"
    phases = import_phases(tmp_path, "inspector.json", both)
    by_op = {p.op: p for p in phases}
    reduce, scatter = by_op["AllReduce"], by_op["ReduceScatter"]
    # the plain record: placed at its dump time less its execution time
    assert reduce.end_ns == 1748030377748202 * 1000 and reduce.end_ns - reduce.begin_ns == 61974 * 1000
    assert reduce.bytes == 17179869184 and reduce.rank_hosts == {2: "example-hostname"}
    assert reduce.comm == "0x7f8c496ae9f661"
    # the verbose record: placed by its own event trace
    assert scatter.begin_ns == 1752867229235059 * 1000 and scatter.end_ns - scatter.begin_ns == 41057 * 1000
    assert scatter.rank_hosts == {4: "example-hostname"} and scatter.bytes == 2147483648


def test_a_kineto_trace_with_its_base_time(tmp_path):
    text = kineto(
        fixture("kineto_trace_ncclKernel_AllReduce_RING_LL_a100_hta.jsonfrag"),
        fixture("kineto_trace_record_param_comms_allreduce_a100_hta.jsonfrag"),
        baseTimeNanoseconds=1_700_000_000_000_000_000,
    )
    assert detect(text) == "kineto"
    (phase,) = import_phases(tmp_path, "trace.json", text, "--host", "gpu3")
    assert (phase.op, phase.comm, phase.rank_hosts) == ("AllReduce", "pg:0", {0: "gpu3"})
    assert phase.begin_ns == 1_700_000_000_000_000_000 + int(4458677009853.422 * 1000)
    assert phase.end_ns - phase.begin_ns == pytest.approx(2636669, abs=2)
    assert phase.bytes == 6637568 * 4, "In msg nelems of dtype Float"


def test_a_kineto_trace_without_wall_clock_times_is_refused_with_the_reason():
    text = kineto(fixture("kineto_trace_ncclKernel_AllReduce_RING_LL_a100_hta.jsonfrag"))
    with pytest.raises(FormatError, match="not wall-clock"):
        list(records("kineto", text, "gpu3", []))


def test_an_older_kineto_trace_names_the_collective_by_its_kernel(tmp_path):
    text = kineto(fixture("kineto_trace_ncclKernel_AllReduce_ncclWorkElem_rank3_hta_older.jsonfrag"))
    (phase,) = import_phases(tmp_path, "old.json", text, "--host", "gpu0")
    assert phase.op == "AllReduce" and phase.begin_ns == 1661203463048756 * 1000
    assert phase.end_ns - phase.begin_ns == 1808 * 1000


def test_the_flight_recorder_dump(tmp_path):
    text = flight_recorder_json()
    assert detect(text) == "flight-recorder"
    (phase,) = import_phases(tmp_path, "fr.json", text, "--host", "gpu1")
    assert (phase.op, phase.comm, phase.hosts) == ("AllReduce", "pg:0", ["gpu1"])
    assert phase.begin_ns == 1724779239936775119 and phase.end_ns == 1724779239975811724
    assert phase.bytes == 3 * 4 * 4, "input size [3, 4] of Float"


def test_what_cannot_be_placed_is_said(tmp_path, capsys):
    prom = tmp_path / "inspector.prom"
    prom.write_text(fixture("nccl_inspector_prometheus_metrics_readme_example.prom"))
    fr = tmp_path / "fr.json"
    fr.write_text(flight_recorder_json())
    out = tmp_path / "p.trace"
    assert main(["phases", "import", "--job", "j", "--out", str(out), str(prom), str(fr)]) == 1
    err = capsys.readouterr().err
    assert "no time per collective" in err and "does not name its host: give --host" in err


def test_two_ranks_traces_of_one_host_stay_two_ranks(tmp_path):
    """Each rank sees one GPU (CUDA_VISIBLE_DEVICES), so its kernels' pid is 0 in every rank's
    trace: the ranks of one host, imported together, must not merge into one (found: every call
    of a host's two Flight Recorder dumps, which name no process, became the last one's rank)."""
    base = json.loads(
        kineto(
            fixture("kineto_trace_ncclKernel_AllReduce_RING_LL_a100_hta.jsonfrag"),
            baseTimeNanoseconds=1_700_000_000_000_000_000,
        )
    )
    files = []
    for rank in (0, 1):
        doc = json.loads(json.dumps(base))
        doc["distributedInfo"]["rank"] = rank
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps(doc))
        files.append(path)
    out = tmp_path / "both.trace"
    assert (
        main(["phases", "import", "--job", "bench", "--host", "gpu3", "--out", str(out), *map(str, files)])
        == 0
    )
    with TraceReader(out) as reader:
        got = [decode(r.value(), PhaseMessage) for r in reader]
    assert sorted(c.rank for m in timed(got) for c in m.calls) == [0, 1]
