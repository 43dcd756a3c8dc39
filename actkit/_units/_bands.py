"""What a unit report reads from the pass's histograms and samples: the units that are dead,
the share of rows beyond 3 SD, the quantile bands' edges and their examples.

The histogram of a unit counts every row exactly, in bins of width ``w``; its quantiles are
those of the distribution that spreads each bin's rows evenly over the bin (linear between
the bin's edges: the true quantile lies in the same bin, so an edge is off by less than one
bin width). The bands' examples come from the unit's own samples (:mod:`actkit._units._pass`):
the upper band (99-100 %) from the sample of its tail when the tail's threshold lies at or
below the band (a uniform sample of the band), else, as the lower bands, from the uniform
sample of its active rows; each band shows up to :data:`PER_BAND` of them, the rows of
smallest priority, sorted by value.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BANDS", "DEAD_SCALE", "DENSE", "PER_BAND", "band_examples", "band_edges", "beyond_share", "dead_units"]

#: quantile bands of a unit's active rows below its top examples (fractions of the ranked rows)
BANDS = ((0.5, 0.9), (0.9, 0.99), (0.99, 1.0))
#: examples per band (fewer where the unit's samples hold fewer rows of the band)
PER_BAND = 5
#: a unit is dead when every value lies within this fraction of the layer's scale (its largest |value|) of 0
DEAD_SCALE = 1e-6
#: a unit active (non-zero) on at least this share of rows is dense: its card shows the share beyond 3 SD
DENSE = 0.99


def dead_units(vmin, vmax) -> np.ndarray:
    """(U,) bool: the units whose every value lies within :data:`DEAD_SCALE` times the layer's
    scale (the largest |value| of any unit) of zero; every unit of an all-zero layer."""
    size = np.maximum(np.abs(vmin), np.abs(vmax))
    scale = float(size.max()) if size.size else 0.0
    return size <= DEAD_SCALE * scale


def _dense_counts(hist):
    """``(counts (U, B), left (U,), width (U,))``: every unit's histogram summed over labels,
    the left edge of its first bin and its bin width."""
    w = np.ldexp(1.0, hist["e"])
    return hist["counts"].sum(axis=1).astype(np.float64), hist["lo"] * w, w


def _cdf_at(counts, left, w, x):
    """Rows below ``x`` (U,) per unit, each bin's rows spread evenly over the bin."""
    B = counts.shape[1]
    pos = np.clip((x - left) / w, 0, B)
    i = np.minimum(np.floor(pos).astype(np.int64), B - 1)
    before = np.cumsum(counts, axis=1) - counts
    rows = np.arange(counts.shape[0])
    return before[rows, i] + counts[rows, i] * np.clip(pos - i, 0, 1)


def beyond_share(hist, mean, sd, n) -> np.ndarray:
    """(U,) share of rows whose value lies more than 3 SD from the unit's mean (to the
    histogram's resolution: a bin cut by ``mean +- 3 sd`` counts in proportion)."""
    counts, left, w = _dense_counts(hist)
    below = _cdf_at(counts, left, w, mean - 3 * sd)
    above = counts.sum(axis=1) - _cdf_at(counts, left, w, mean + 3 * sd)
    return np.where(sd > 0, (below + above) / max(n, 1), 0.0)


def band_edges(hist, n, active, vmax) -> np.ndarray:
    """(len(BANDS), 2, U): each band's lower and upper edge per unit, the quantiles of the
    unit's active (non-zero) values from its histogram (its zeros taken out of the bin of 0);
    the last band's upper edge is the unit's largest value."""
    counts, left, w = _dense_counts(hist)
    U, B = counts.shape
    zero_bin = np.floor(-left / w).astype(np.int64)  # the bin holding 0: [0, w)
    has = (zero_bin >= 0) & (zero_bin < B)
    counts[np.flatnonzero(has), zero_bin[has]] -= (n - active)[has]
    cum = np.cumsum(counts, axis=1)
    out = np.zeros((len(BANDS), 2, U))
    for b, (lo_q, hi_q) in enumerate(BANDS):
        for side, q in enumerate((lo_q, hi_q)):
            target = q * active
            i = np.minimum((cum < target[:, None]).sum(axis=1), B - 1)  # first bin reaching the target
            before = np.take_along_axis(cum, i[:, None], 1)[:, 0] - counts[np.arange(U), i]
            inside = counts[np.arange(U), i]
            frac = np.where(inside > 0, (target - before) / np.where(inside > 0, inside, 1), 0.0)
            out[b, side] = left + w * (i + np.clip(frac, 0, 1))
    out[-1, 1] = vmax
    out[..., active == 0] = np.nan
    return out


def _pick(rows, values, lo, hi, closed, exclude, per_band):
    """Up to ``per_band`` ``(row, value)`` of a sample column (in priority order) with ``lo <=
    value < hi`` (``<= hi`` when ``closed``), rows in the set ``exclude`` left out; sorted by
    value, highest first."""
    inside = (rows >= 0) & (values >= lo) & ((values <= hi) if closed else (values < hi))
    picked = []
    for i in np.flatnonzero(inside):
        r = int(rows[i])
        if r not in exclude:
            picked.append((r, float(values[i])))
            if len(picked) == per_band:
                break
    return sorted(picked, key=lambda e: (-e[1], e[0]))


def band_examples(stats, edges, j, top_rows, per_band=PER_BAND) -> list:
    """The bands of unit ``j`` (``[]`` when it has no active row): ``[{"quantiles", "lo", "hi",
    "source", "examples": [(row, value)]}]``, highest band first; ``source`` is ``"tail"`` or
    ``"sample"`` (where the examples come from)."""
    if stats.active[j] == 0:
        return []
    exclude = set(np.asarray(top_rows).tolist())
    out = []
    for b in reversed(range(len(BANDS))):
        lo, hi = float(edges[b, 0, j]), float(edges[b, 1, j])
        top_band = BANDS[b][1] == 1.0
        from_tail = top_band and stats.tau_hi[j] <= lo  # the tail sample holds every row of the band
        src = stats.tail if from_tail else stats.sample
        ex = _pick(src[1][:, j], src[2][:, j], lo, hi, top_band, exclude, per_band)
        out.append({"quantiles": list(BANDS[b]), "lo": lo, "hi": hi, "source": "tail" if from_tail else "sample",
                    "examples": ex})
    return out
