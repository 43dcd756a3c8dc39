"""Running measures on two row sources: one streaming pass for every moment-based measure
(:func:`moments_of`), one seeded row sample for every row-based one (:func:`rows_of`), and
:func:`evaluate`, which runs a chosen set through the protocol."""

from __future__ import annotations

import numpy as np

from actkit import _data
from actkit._device import resolve_device
from actkit._progress import progress_bar
from actkit._groups import SampleGroups
from actkit._rows import block_rows as default_block_rows
from actkit.errors import ValidationError
from actkit.measures._protocol import Moments
from actkit.measures._rowtools import sample_by_groups
from actkit.stats import CrossMoments

__all__ = ["moments_of", "rows_of", "evaluate", "held_out_mask", "check_sources", "constant_side",
           "refuse_constant"]

#: a column varies when its standard deviation exceeds this share of its mean's size (float32
#: rounding: a column of one value read as float32 and averaged in float64 stays below it)
CONSTANT_RTOL = 1e-7


def check_sources(A, B):
    """Two 2-D row sources with the same number of rows; returns ``(n, (p, q))``."""
    for X, name in ((A, "A"), (B, "B")):
        if not hasattr(X, "shape") or len(tuple(X.shape)) != 2:
            raise ValidationError(f"{name} must be 2-D (n_rows, n_features), got "
                                  f"{getattr(X, 'shape', type(X).__name__)}")
    n = _data.n_rows(A)
    if _data.n_rows(B) != n:
        raise ValidationError(f"A and B must have the same number of rows (the same inputs), got "
                              f"{n} and {_data.n_rows(B)}")
    if n < 2:
        raise ValidationError(f"need at least 2 rows, got {n}")
    return n, (_data.n_features(A), _data.n_features(B))


def _paired_blocks(A, B, br):
    """float64 blocks of rows ``[i br, (i + 1) br)`` of both sources: the same boundaries
    (and so the same sums, bit for bit) for an array in memory and a store."""
    return zip(_data.iter_blocks(A, block_rows=br, dtype=np.float64),
               _data.iter_blocks(B, block_rows=br, dtype=np.float64))


def moments_of(A, B, *, test_mask=None, progress=None, block_rows=None):
    """The :class:`Moments` of all rows of ``A`` and ``B`` in one pass (memory O(D^2),
    independent of the rows); with ``test_mask`` (bool, shape (n,)) also ``parts``
    ``(fit, test)``.

    Parameters
    ----------
    A, B : array-like or store layer of shape (n, p), (n, q)
    test_mask : ndarray of bool of shape (n,), optional
    progress : bool, optional
    block_rows : int, optional
        Rows per read block (default: about 32 MiB of float64 rows of the wider side).
    """
    n, (p, q) = check_sources(A, B)
    br = block_rows or default_block_rows(max(p, q), 8)
    dtype = "float32" if all(_data.source_dtype(X) == np.float32 for X in (A, B)) else "float64"
    whole = CrossMoments(debiased_terms=True)
    fit, test = CrossMoments(debiased_terms=False), CrossMoments(debiased_terms=False)
    start = 0
    with progress_bar(n, "measures: moments", progress) as bar:
        for xa, xb in _paired_blocks(A, B, br):
            _finite(xa, "A", start)
            _finite(xb, "B", start)
            if whole.n == 0:
                whole.add(xa, xb)
                fit.shift_x = test.shift_x = whole.shift_x
                fit.shift_y = test.shift_y = whole.shift_y
            else:
                whole.add(xa, xb)
            if test_mask is not None:
                sel = test_mask[start : start + xa.shape[0]]
                fit.add(xa[~sel], xb[~sel])
                test.add(xa[sel], xb[sel])
            start += xa.shape[0]
            bar.update(xa.shape[0])
    m = Moments.from_cross(whole, dtype=dtype)
    if test_mask is not None:
        if fit.n < 2 or test.n < 2:
            raise ValidationError(f"too few rows ({n}) for a fit/test split")
        m = m.with_parts(Moments.from_cross(fit, dtype=dtype), Moments.from_cross(test, dtype=dtype))
    return m


def _finite(block, name, start):
    if not np.all(np.isfinite(block)):
        bad = start + int(np.flatnonzero(~np.all(np.isfinite(block), axis=1))[0])
        raise ValidationError(f"{name} contains NaN or infinite values (first at row {bad})")


def _no_variance(var, mean) -> bool:
    """Every column's variance (``var``, shape (p,)) within float32 rounding of its mean."""
    return bool(np.all(np.asarray(var) <= (CONSTANT_RTOL * np.abs(np.asarray(mean))) ** 2))


def constant_side(moments) -> str | None:
    """``"A"``, ``"B"`` or ``"A and B"``: the side(s) of a :class:`Moments` whose rows are all
    the same (no column varies, :data:`CONSTANT_RTOL`); None when both vary."""
    n = max(float(moments.n), 1.0)
    sides = [name for name, S, mu in (("A", moments.Saa, moments.mean_a), ("B", moments.Sbb, moments.mean_b))
             if _no_variance(np.diag(S) / n, mu)]
    return " and ".join(sides) or None


def refuse_constant(side, what) -> None:
    """A one-line :class:`ValidationError` when ``side`` (:func:`constant_side`) is not None:
    ``what`` (e.g. ``"linear_cka"``) has no value on a representation without variance (CKA,
    CCA and correlations divide by it; a nearest-neighbour or distance ranking is all ties)."""
    if side:
        verb = "are" if " and " in side else "is"
        raise ValidationError(f"{side} {verb} constant (every row the same, zero variance): {what} is undefined; "
                              "check the layer and its rows (a dead or padded output, the wrong layer)")


def held_out_mask(n, groups, test_fraction, random_state):
    """Test rows of a seeded split by input sample: ``round(test_fraction x samples)`` whole
    samples, drawn by ``np.random.default_rng(random_state).permutation`` (one row per
    sample without ``groups``: the split of :func:`actkit.metrics.linear_r2`)."""
    if not 0 < test_fraction < 1:
        raise ValidationError(f"test_fraction must be in (0, 1), got {test_fraction}")
    samples = SampleGroups(groups, n if groups is None else None)   # ids of any shape's rows, unchecked
    inv, g = samples.inverse, samples.G
    n_test = int(round(g * test_fraction))
    if n_test < 1 or g - n_test < 1:
        raise ValidationError(f"too few input samples ({g}) for a fit/test split")
    is_test = np.zeros(g, bool)
    is_test[np.random.default_rng(random_state).permutation(g)[:n_test]] = True
    return is_test[inv]


def rows_of(A, B, groups, max_rows, random_state, device="cpu", what="a measure on rows"):
    """The seeded row sample (:func:`sample_by_groups`) as torch float64 tensors on
    ``device``; returns ``(A_rows, B_rows, rows)``. A side whose sampled rows are all the
    same is refused (:func:`refuse_constant`, naming ``what``)."""
    import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

    n, _ = check_sources(A, B)
    rows = sample_by_groups(n, groups, max_rows, random_state)
    dev = resolve_device(device)
    out = []
    for X, name in ((A, "A"), (B, "B")):
        block = _data.gather_rows(X, rows) if _data.is_streaming(X) else _data.as_array(X)[rows]
        block = np.asarray(block, dtype=np.float64)
        _finite(block, name, 0)
        if _no_variance(block.var(axis=0), block.mean(axis=0)):
            refuse_constant(name, what)
        out.append(torch.from_numpy(block).to(dev))
    return out[0], out[1], rows


def evaluate(A, B, chosen, *, groups=None, max_rows=10000, random_state=0, device="cpu",
             moments=None, progress=None):
    """Every measure of ``chosen`` (``[(Measure, params), ...]``, alignment ones excluded)
    on ``A`` and ``B``: the moment-based ones from one pass (or ``moments``, a
    :class:`Moments` the caller holds), the row-based ones from one seeded sample.

    Returns
    -------
    dict
        ``{name: value}``, and ``<name>_rows`` (rows used) for each sampled measure.
    """
    n, widths = check_sources(A, B)
    for m, params in chosen:
        if m.source == "alignment":
            raise ValidationError(f"{m.name} is an alignment error: use actkit.compare")
        m.check_data(params, widths, None)
    out = {}
    by_moments = [(m, p) for m, p in chosen if m.source == "moments"]
    if by_moments and moments is None:
        split = [p for m, p in by_moments if m.needs_split]
        mask = (held_out_mask(n, groups, split[0].get("test_fraction", 0.5), random_state)
                if split else None)
        moments = moments_of(A, B, test_mask=mask, progress=progress)
    if by_moments:
        refuse_constant(constant_side(moments), ", ".join(m.name for m, _ in by_moments))
    for m, params in by_moments:
        out[m.name] = float(m.compute(moments, **params))
    by_rows = [(m, p) for m, p in chosen if m.source == "rows"]
    if by_rows:
        a, b, rows = rows_of(A, B, groups, max_rows, random_state, device,
                             what=", ".join(m.name for m, _ in by_rows))
        for m, params in by_rows:
            m.check_data(params, widths, rows.size)
            out[m.name] = float(m.compute(a, b, **params))
            out[f"{m.name}_rows"] = int(rows.size)
    return out
