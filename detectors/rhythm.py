"""A traffic's rhythm: the period with which a rate series repeats, from its autocorrelation.

A training job's traffic repeats with its iteration: every step, the same collectives in the same
order. The byte rates of the ports its hosts use, polled every second or faster, repeat with it
when the step is longer than two polls. The period is the lag at which the series matches itself:
of the autocorrelation's peaks, the shortest that divides its highest and reaches ``SHARE`` of it
(a series that repeats every 4 s also matches itself at 8 s and 12 s; the first of them is its
period). Gaps (polls nothing was read in) are left out of the correlation, not filled: the
correlation at each lag is taken over the pairs of polls both read.

Peaks are placed between lags by the parabola through the peak and its neighbours: a period of
7.5 s polled every second reads 7.5, not 7 or 8, so a stretch of a fifth is seen at such polls.
Such a period repeats exactly only at its double (15 s); its own peak, split over the two lags
beside it, reaches some seven tenths of that, hence ``SHARE``. ``traffic_rhythm.py`` follows each
NIC's period over time and says when it stretches or stops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_STRENGTH = 0.3
"""Autocorrelation a peak must reach to be a rhythm: below, the series is noise or drifts."""
SHARE = 0.6
"""A peak that divides the highest and reaches this share of it is the period."""


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
    acf = series_autocorrelation(x, min_lag)
    return None if acf is None else period_of(acf, dt_s, min_lag)


def series_autocorrelation(x: np.ndarray, min_lag: int = 2) -> np.ndarray | None:
    """The autocorrelation up to a third of the series, or None where it cannot hold a period
    (too short, too few polls read, or flat)."""
    max_lag = len(x) // 3
    if max_lag <= min_lag or np.count_nonzero(~np.isnan(x)) < 3 * min_lag or np.nanstd(x) == 0:
        return None
    return autocorrelation(np.asarray(x, dtype=float), max_lag)


def period_of(acf: np.ndarray, dt_s: float, min_lag: int = 2) -> Rhythm | None:
    """The period an autocorrelation shows (``rhythm``), or None."""
    inner = acf[1:-1]
    peaks = np.flatnonzero((inner > acf[:-2]) & (inner >= acf[2:])) + 1
    peaks = peaks[(peaks >= min_lag) & (acf[peaks] >= MIN_STRENGTH)]
    if peaks.size == 0:
        return None
    at = peaks + _vertices(acf[peaks - 1], acf[peaks], acf[peaks + 1])
    best = int(np.argmax(acf[peaks]))
    multiple = np.rint(at[best] / at)
    divides = (multiple >= 1) & (np.abs(at[best] - multiple * at) <= np.maximum(1.0, 0.05 * at[best]))
    first = int(np.flatnonzero(divides & (acf[peaks] >= SHARE * acf[peaks[best]]))[0])
    return Rhythm(float(at[first] * dt_s), float(acf[peaks[first]]))


def match_at(acf: np.ndarray, lag: float) -> float:
    """The autocorrelation at a lag between two (linear between them); NaN beyond the series."""
    if not 0 <= lag <= len(acf) - 1:
        return float("nan")
    return float(np.interp(lag, np.arange(len(acf)), acf))


def correlation_at(x: np.ndarray, lag: float) -> float:
    """The autocorrelation of ``x`` at one lag between two (linear between them), as
    ``autocorrelation`` gives it, computed at those two lags alone: whether a series still repeats
    with a known period costs two dot products, not a spectrum. NaN where it cannot say."""
    known = ~np.isnan(x)
    n = np.count_nonzero(known)
    if n == 0:
        return float("nan")
    centred = np.where(known, x - x[known].mean(), 0.0)
    variance = float(np.dot(centred, centred)) / n
    low = int(np.floor(lag))
    if variance == 0 or low < 1 or low + 1 >= len(x):
        return float("nan")
    at = []
    for k in (low, low + 1):
        pairs = np.count_nonzero(known[:-k] & known[k:])
        if pairs < (len(x) - k) / 3:
            return float("nan")
        at.append(float(np.dot(centred[:-k], centred[k:])) / pairs / variance)
    share = lag - low
    return at[0] * (1 - share) + at[1] * share


def _vertices(left: np.ndarray, mid: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Where, from -0.5 to 0.5 of a lag, the parabola through each peak and its two neighbours
    tops (0 where it does not curve down)."""
    curve = left - 2 * mid + right
    with np.errstate(invalid="ignore", divide="ignore"):
        offset = np.clip(0.5 * (left - right) / curve, -0.5, 0.5)
    return np.where(np.isfinite(curve) & (curve < 0), offset, 0.0)
