"""What the phase collector costs a node: CPU per 10,000 NCCL COLL lines (read from files, parsed,
coalesced), and the phase messages it sends for a job of 8 ranks each doing 2,000 collectives a
second, against the one-message-per-call baseline. Prints JSON lines.

The lines are the real COLL line of torchtitan#1369 (tests/fixtures), one rank per file, in two
layouts, one JSON line each:
- ``runs``: AllReduce and AllGather alternating every 50 calls of one size, as a training step's
  data-parallel and tensor-parallel collectives do;
- ``interleaved``: the collective and the size change at every call, the worst case for the
  collector, which reads a run of like calls at once.
The files are read as `phases collect` reads them: each rank's last 0.1 s of lines at a time,
stamped with the time of the read.

    python bench/bench_phases.py [--seconds 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fabricwatch.ingest.phases.coalescer import PhaseCoalescer
from fabricwatch.ingest.phases.log_tail import LogTail
from fabricwatch.ingest.phases.nccl_phases import NcclPhaseReader

RANKS = 8
CALLS_PER_S = 2000
LINE = (
    "hopper01:{pid}:191425 [{dev}] NCCL INFO {op}: opCount {n:x} sendbuff 0x7fa921200000 recvbuff "
    "0x7fa915800000 count {count} datatype 7 op 0 root 0 comm 0x55fca23fc{rank:03x} [nranks=8] "
    "stream 0x55fca193e8e0\n"
)


LAYOUTS = {
    "runs": lambda n: ("AllReduce" if (n // 50) % 2 == 0 else "AllGather", 2097152),
    "interleaved": lambda n: ("AllReduce" if n % 2 == 0 else "AllGather", 1024 + n % 997),
}
"""The collective and the element count of a rank's ``n``-th call."""


def write_logs(folder: Path, seconds: float, layout: str = "runs") -> int:
    calls = int(CALLS_PER_S * seconds)
    call = LAYOUTS[layout]
    for rank in range(RANKS):
        with open(folder / f"rank{rank}.log", "w") as f:
            for n in range(calls):
                op, count = call(n)
                f.write(LINE.format(pid=191000 + rank, dev=rank, op=op, n=n, count=count, rank=rank))
    return calls * RANKS


def run_once(folder: Path) -> tuple[float, int, int]:
    """CPU seconds to read every file and to parse and coalesce its lines, the lines, the phases.
    Cutting the files' text into the 0.1 s reads a live collector would make is not counted."""
    reader = NcclPhaseReader(PhaseCoalescer("bench", gap_s=0.5), lambda _: None)
    t0_ns = 1_800_000_000 * 10**9
    cpu0 = time.process_time()
    with LogTail([str(folder / "*.log")], from_start=True) as tail:
        texts = [text for _, text in tail.read_chunks()]
    cpu = time.process_time() - cpu0
    reads = _in_reads(texts)
    cpu0 = time.process_time()
    phases = sum(len(reader.chunk(text, t0_ns + n * READ_NS)) for n, text in reads)
    phases += len(reader.close_all())
    return cpu + time.process_time() - cpu0, reader.stats.lines, phases


READ_NS = 100_000_000
"""`phases collect` reads every 0.1 s: 200 calls per rank file per read."""


def _in_reads(texts: list[str]) -> list[tuple[int, str]]:
    """Each file's text cut into 0.1 s of its rank's calls, with the number of the read."""
    per_read = CALLS_PER_S * READ_NS // 10**9
    out = []
    for text in texts:
        lines = text.splitlines(keepends=True)
        out += [(i // per_read, "".join(lines[i : i + per_read])) for i in range(0, len(lines), per_read)]
    return sorted(out, key=lambda r: r[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of the job's logging (default: 5)")
    p.add_argument("--repeat", type=int, default=3, help="runs; the best is reported (default: 3)")
    args = p.parse_args()
    for layout in LAYOUTS:
        with tempfile.TemporaryDirectory(prefix="fw-bench-phases-") as tmp:
            folder = Path(tmp)
            lines = write_logs(folder, args.seconds, layout)
            best = min((run_once(folder) for _ in range(args.repeat)), key=lambda r: r[0])
        report(layout, best, lines, args.seconds)


def report(layout: str, best: tuple[float, int, int], lines: int, seconds: float) -> None:
    cpu_s, read, phases = best
    assert read == lines, (read, lines)
    per_10k_ms = cpu_s / lines * 10_000 * 1e3
    node_share = cpu_s / seconds
    print(
        json.dumps(
            {
                "bench": "phases_collector",
                "layout": layout,
                "lines": lines,
                "cpu_ms_per_10k_lines": round(per_10k_ms, 2),
                "us_per_line": round(cpu_s / lines * 1e6, 3),
                "core_share_at_8x2000_calls_per_s": round(node_share, 4),
                "messages_per_s": round(phases / seconds, 2),
                "messages_per_s_per_rank": round(phases / seconds / RANKS, 3),
                "baseline_messages_per_s": CALLS_PER_S * RANKS,
                "messages_ratio_to_baseline": round(phases / seconds / (CALLS_PER_S * RANKS), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
