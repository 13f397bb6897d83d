"""One build's stage 1 on a series of snapshots: the child of ``bench_builds.py``.

Run as ``python bench/series_child.py SERIES NAME REPEATS BATCH`` with ``PYTHONPATH`` naming the
build (a ``pip install --target`` of it) or unset (the installed one). It uses only what every
build since issue 37's start has (``CounterSpec``, ``Snapshot``, ``encode``, ``Stage1Worker``), and
encodes the series itself, so each build reads its own wire format. It prints one JSON line: the
build's path and the CPU time per snapshot of each of ``REPEATS`` passes, each through a new
worker, in batches of ``BATCH`` as a worker's consumer hands them over.
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

import fabricwatch
from fabricwatch.blas_threads import limit_blas_threads
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.schemas.messages import CounterSpec, Snapshot, encode
from fabricwatch.streams.stages import Stage1Worker


def encoded(rows: list[tuple]) -> list[bytes]:
    """The series' snapshots as this build sends them; snapshots of one table share its list."""
    tables: dict[tuple, list[CounterSpec]] = {}
    out = []
    for device, kind, ts_ns, counters, ports, values in rows:
        key = tuple(counters)
        if key not in tables:
            tables[key] = [CounterSpec(n, index=i, kind=k, width=w, scale=s) for n, i, k, w, s in counters]
        snap = Snapshot(
            device=device, device_kind=kind, ts_ns=ts_ns, counters=tables[key], ports=ports, values=values
        )
        out.append(encode(snap))
    return out


def main() -> None:
    series, name, repeats, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    limit_blas_threads()  # as the workers run
    with open(series, "rb") as f:
        messages = encoded(pickle.load(f)[name])
    sources = ["fabric.counters/0"] * batch
    Stage1Worker(DetectorConfig()).process(messages[:batch], sources)  # imports and caches, not timed
    passes = []
    for _ in range(repeats):
        stage = Stage1Worker(DetectorConfig())
        start = time.process_time()
        for i in range(0, len(messages), batch):
            stage.process(messages[i : i + batch], sources[: len(messages[i : i + batch])])
        passes.append((time.process_time() - start) / len(messages) * 1e6)
    build = str(Path(fabricwatch.__file__).parent.parent)
    print(json.dumps({"build": build, "series": name, "snapshots": len(messages), "cpu_us": passes}))


if __name__ == "__main__":
    main()
