"""A traffic's rhythm: the period with which a rate series repeats, from its autocorrelation.

A training job's traffic repeats with its iteration: every step, the same collectives in the same
order. The byte rates of the ports its hosts use, polled every second or faster, repeat with it
when the step is longer than two polls. The period is the lag at which the series best matches
itself: the autocorrelation's first peak that is nearly as high as its highest (a series that
repeats every 4 s also matches itself at 8 s and 12 s; the first of them is its period). Gaps
(polls nothing was read in) are left out of the correlation, not filled: the correlation at each
lag is taken over the pairs of polls both read.

The core of issue 36's item 4; the detector that follows a job's period over time and says when it
stretches or stops is not built yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_STRENGTH = 0.3
"""Autocorrelation a peak must reach to be a rhythm: below, the series is noise or drifts."""
NEAR_HIGHEST = 0.9
"""A peak this close to the highest is a period; the highest may be one of its multiples."""


@dataclass(frozen=True)
class Rhythm:
    period_s: float
    strength: float
    """The autocorrelation at the period: 1 repeats exactly, ``MIN_STRENGTH`` barely."""


def autocorrelation(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Per lag 0..``max_lag``, the correlation of the series with itself shifted by it, over the
    pairs of samples both known (NaN: unknown); NaN where fewer than a third of pairs are known."""
    known = ~np.isnan(x)
    centred = np.where(known, x - np.nanmean(x), 0.0)
    n = len(x)
    size = 1 << int(np.ceil(np.log2(2 * n)))
    spectrum, mask = np.fft.rfft(centred, size), np.fft.rfft(known.astype(float), size)
    products = np.fft.irfft(spectrum * spectrum.conj(), size)[: max_lag + 1]
    pairs = np.rint(np.fft.irfft(mask * mask.conj(), size)[: max_lag + 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        acf = (products / pairs) / (products[0] / pairs[0])
    return np.where(pairs >= np.maximum(n - np.arange(max_lag + 1), 1) / 3, acf, np.nan)


def rhythm(x: np.ndarray, dt_s: float, min_lag: int = 2) -> Rhythm | None:
    """The period of ``x`` (one sample every ``dt_s``), or None if it has none: a peak of the
    autocorrelation from ``min_lag`` to a third of the series, at ``MIN_STRENGTH`` or more."""
    max_lag = len(x) // 3
    if max_lag <= min_lag or np.count_nonzero(~np.isnan(x)) < 3 * min_lag or np.nanstd(x) == 0:
        return None
    acf = autocorrelation(np.asarray(x, dtype=float), max_lag)
    inner = acf[1:-1]
    peaks = np.flatnonzero((inner > acf[:-2]) & (inner >= acf[2:])) + 1
    peaks = peaks[(peaks >= min_lag) & (acf[peaks] >= MIN_STRENGTH)]
    if peaks.size == 0:
        return None
    best = acf[peaks].max()
    lag = int(peaks[acf[peaks] >= NEAR_HIGHEST * best][0])
    return Rhythm(lag * dt_s, float(acf[lag]))
