"""The stages' processes use one BLAS thread unless the environment chose a number: their matrix
products are small, and BLAS threads spinning beside the broker and the other workers cost stage 1
a third of its time (``fabricwatch.blas_threads``)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import numpy; "
    "from fabricwatch.blas_threads import limit_blas_threads; "
    "from threadpoolctl import threadpool_info; "
    "limit_blas_threads(); "
    "print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))"
)


def blas_threads(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_one_blas_thread_unless_the_environment_says_otherwise():
    assert blas_threads() == "[1]"
    assert blas_threads(OPENBLAS_NUM_THREADS="2") == "[2]"
