"""One BLAS thread for the processes that run the stages.

numpy's BLAS (OpenBLAS) runs a matrix product on a thread per core. Stage 1's products are small
(a batch's ports by a few dozen counters, projected onto the storage columns in
``detectors.summary``): waking the threads costs more than the product, and on a busy node they
spin against the broker and the other workers. On this 2-core machine, alternating runs of the
256-host scenario: stage 1 in one process cost 114-123 µs a snapshot with one thread against
169-186 µs with two while another job ran beside it (alone, the two were within the noise, 60-93
against 71-87 µs), and two workers beside the broker went through 1.75-1.98 M values/s against
1.51-1.65 M (``bench/bench_streaming.py``).
"""

from __future__ import annotations

import os

_SET_BY_USER = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_blas_threads() -> None:
    """Use one BLAS thread from now on, unless the environment chose a number."""
    if any(os.environ.get(name) for name in _SET_BY_USER):
        return
    import numpy  # noqa: F401  (the BLAS must be loaded for its threads to be limited)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
