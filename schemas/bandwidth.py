"""A job's collectives as its owners measure them: each call's algorithm and bus bandwidth, the
size bucket it is compared within, and a window's median and tail.

Bandwidths follow nccl-tests' definitions (``doc/PERFORMANCE.md``; the NCCL Inspector computes the
same, ``inspectorComputeOpBw``), so a job's figures read against a benchmark run's:

* algbw = S / t, where S is the whole array: the buffer a rank gave NCCL, times the rank count for
  collectives whose NCCL count is per rank (AllGather's send count, ReduceScatter's receive count;
  Gather and Scatter in nccl-tests);
* busbw = algbw x 2(n-1)/n for an AllReduce, x (n-1)/n for AllGather, ReduceScatter, AllToAll,
  Gather and Scatter, x 1 for the rest (Broadcast, Reduce, Send, Recv, SendRecv): the rate each
  rank's link carries, comparable with the hardware's peak whatever the rank count.

GB/s here is 1e9 bytes a second, as both print it. Everything is vectorised over calls. It lives
beside the messages because the simulator (``ingest``) times its calls by the same definitions
the job stage and the sink judge them by.
"""

from __future__ import annotations

import numpy as np

PER_RANK_COUNT = ("AllGather", "ReduceScatter", "Gather", "Scatter")
"""Collectives whose NCCL count is each rank's share: the whole array is n of them."""
SHARE = ("AllGather", "ReduceScatter", "AllToAll", "Gather", "Scatter")
"""busbw = algbw x (n-1)/n."""


def bus_factor(ops: np.ndarray, nranks: np.ndarray) -> np.ndarray:
    """busbw / algbw per call (nccl-tests' ``*GetBw``)."""
    n = np.asarray(nranks, dtype=np.float64)
    share = (n - 1) / n
    ops = np.asarray(ops)
    return np.where(ops == "AllReduce", 2 * share, np.where(np.isin(ops, SHARE), share, 1.0))


def bandwidths(
    ops: np.ndarray, nbytes: np.ndarray, nranks: np.ndarray, dur_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(algbw, busbw) in GB/s of each call: ``nbytes`` the buffer one rank gave NCCL. A call of no
    duration has no bandwidth (NaN), not an infinite one."""
    ops = np.asarray(ops)
    n = np.asarray(nranks, dtype=np.float64)
    array = np.asarray(nbytes, dtype=np.float64) * np.where(np.isin(ops, PER_RANK_COUNT), n, 1.0)
    seconds = np.asarray(dur_ns, dtype=np.float64) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(seconds > 0, array / 1e9 / seconds, np.nan)
    return algbw, algbw * bus_factor(ops, n)


def size_bucket(nbytes: np.ndarray) -> np.ndarray:
    """The power of two at or below each call's bytes (0 for an empty call): calls of one bucket
    are compared with each other; a job that changes its message sizes changes buckets, not
    speed."""
    b = np.asarray(nbytes, dtype=np.int64)
    out = np.zeros(b.shape, dtype=np.int64)
    pos = b > 0
    out[pos] = np.left_shift(1, np.floor(np.log2(b[pos])).astype(np.int64))
    return out


def bucket_name(bucket: int) -> str:
    """``1 GiB``, ``256 KiB``, ``8 B``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if bucket >= 1 << shift:
            return f"{bucket >> shift} {unit}"
    return f"{bucket} B"


def median_and_tail(values: np.ndarray, q: float = 99.0) -> tuple[float, float]:
    """The median and the ``q`` percentile of the known values (NaN when none is known)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if not v.size:
        return float("nan"), float("nan")
    med, tail = np.percentile(v, [50.0, q])
    return float(med), float(tail)
