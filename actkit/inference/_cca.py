"""Mean CCA of permutations and bootstrap resamples: the same value as
:func:`actkit.measures.cca.mean_cca_from_moments`, about half its work per resample.

Three savings, none an approximation:

* **the sum of the singular values from the smaller Gram.** The canonical correlations are
  the singular values of ``M = Wa Sab Wb^T`` (``Wa``, ``Wb``: whitenings of the sides); their
  squares are the eigenvalues of ``M^T M`` (or ``M M^T``, the smaller), one symmetric
  eigenvalue problem (``eigvalsh``, ~0.4 of an SVD at 384). The square root loses digits
  only for singular values near zero (an eigenvalue's rounding ~1e-16 of the largest moves
  ``sqrt`` by ~1e-16 / (2 sigma)): where the smallest eigenvalue is below
  :data:`GRAM_FLOOR` x the largest, the SVD is used, as the measure does.
* **triangular products.** A whitening by the inverse Cholesky factor is lower triangular:
  ``M`` is two products by triangular factors (numpy's, which release the GIL).
* **no eigenvalues of a resample's sides.** The measure's :func:`~actkit.measures._linalg.whitener`
  computes each side's eigenvalues only to decide that no direction falls below the rank cut
  (then it whitens by the inverse Cholesky factor ``L^-1``). A bound from that factor decides
  the same in O(D^2): ``lambda_min >= 1 / ||L^-1||_2^2 >= 1 / min(||L^-1||_F^2, ||L^-1||_1
  ||L^-1||_inf)`` and ``lambda_max <= min(tr S, ||S||_inf)``; where the bound cannot show it,
  the measure's own whitener decides (the eigenvalues, as the measure computes them).

A permutation keeps both sides, hence their whitenings (computed once inside
:func:`~actkit.measures.reuse_sides`); a bootstrap resample's three scatters are
re-weightings of the per-sample blocks (:meth:`~actkit.inference.Samples.blocks`, one
product of a batch's multiplicities with them).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from actkit.inference._samples import unpacked
from actkit.measures import CHOLESKY_MARGIN, rank_cut, whitener

#: below this x the largest eigenvalue of the Gram, the square root of an eigenvalue would
#: lose digits (a singular value below 1e-5 x the largest): the SVD decides instead
GRAM_FLOOR = 1e-10


def singular_value_sum(M, triangular=(None, None)):
    """Sum and count of the singular values of ``Wa M Wb^T`` (``triangular``: the lower
    triangular ``(Wa, Wb)``; ``(None, None)``: ``M`` is already
    whitened). ``M`` (p, q) float64; returns ``(sum, min(p, q))``."""
    Wa, Wb = triangular
    if Wa is not None:
        # numpy's products, not scipy's trmm / syrk: those hold the GIL (two workers took 1.2x
        # one worker's time, measured), numpy's release it; at 384 a trmm saved no time
        M = Wa @ M @ Wb.T
    p, q = M.shape
    if min(p, q) == 0:
        return 0.0, 0
    gram = M.T @ M if p >= q else M @ M.T       # the smaller Gram (numpy takes syrk for it)
    lam = _eigvalsh(gram)
    if not lam[-1] > 0 or lam[0] < GRAM_FLOOR * lam[-1]:
        rho = np.linalg.svd(M, compute_uv=False)
    else:
        rho = np.sqrt(lam[::-1])
    return float(np.sum(np.clip(rho, 0.0, 1.0))), int(rho.size)


def _eigvalsh(gram):
    """Eigenvalues of a symmetric matrix, ascending: torch's (LAPACK's ``syevd``), which
    releases the GIL, so the resamples' workers run side by side; numpy's and scipy's hold it
    (two worker threads took 1.1x one thread's time at 384, measured). Inside :func:`infer`
    torch runs at one thread per worker."""
    import torch  # torch: ~1.2 s at import (measured); imported already by infer (one thread per worker)

    return torch.linalg.eigvalsh(torch.from_numpy(gram)).numpy()


def _lower(W):
    """Whether a whitening is the (square, lower triangular) inverse Cholesky factor."""
    return W.shape[0] == W.shape[1] and not np.any(np.triu(W, 1))


#: id(W) -> (W, _lower(W)) of the whitenings the permutations reuse (the same arrays in every
#: permutation, inside :func:`~actkit.measures.reuse_sides`): checked once, not per permutation
_LOWER: dict = {}


def _lower_cached(W):
    hit = _LOWER.get(id(W))
    if hit is not None and hit[0] is W:
        return hit[1]
    if len(_LOWER) >= 8:
        _LOWER.clear()
    flag = _LOWER[id(W)] = (W, _lower(W))
    return flag[1]


def mean_cca_resampled(m):
    """:func:`~actkit.measures.cca.mean_cca_from_moments` (default parameters) of
    :class:`~actkit.measures.Moments` ``m``, its sides whitened by the measure's own
    (cached) whitener: the permutations' route."""
    eps = rank_cut(m.dtype)
    Wa, Wb = whitener(m.Saa, eps), whitener(m.Sbb, eps)
    if Wa is None or Wb is None:
        return float("nan")
    return _mean(m.Sab, Wa, Wb, _lower_cached(Wa) and _lower_cached(Wb))


def _mean(Sab, Wa, Wb, lower=None):
    """Mean canonical correlation of ``Wa Sab Wb^T``; ``lower``: whether both whitenings are
    inverse Cholesky factors (None: look)."""
    if Wa is None or Wb is None or min(Wa.shape[0], Wb.shape[0]) == 0:
        return float("nan")
    if lower is None:
        lower = _lower(Wa) and _lower(Wb)
    if lower:
        total, k = singular_value_sum(Sab, (Wa, Wb))
    else:
        total, k = singular_value_sum(Wa @ Sab @ Wb.T)
    return total / k if k else float("nan")


def cholesky_whitener(S, eps):
    """The measure's whitener of a scatter matrix ``S`` (D, D) (None without variance),
    without its eigenvalues where the inverse Cholesky factor's bound shows that no
    direction falls below the rank cut ``eps``."""
    return _cholesky_whitener(S, eps)[0]


def _cholesky_whitener(S, eps):
    """``(W, lower)``: :func:`cholesky_whitener` and whether ``W`` is the inverse Cholesky
    factor. The cheaper bound first (``||L^-1||_F^2`` against ``tr S``), the tighter one
    (``||L^-1||_1 ||L^-1||_inf``, ``||S||_inf``) only where it fails: the same decision as
    both at once."""
    if not np.max(np.diag(S), initial=0.0) > 0:
        return None, False
    try:
        L = np.linalg.cholesky(S)       # the measure's own factor (the same bits as its whitener)
    except np.linalg.LinAlgError:
        return _measure_whitener(S, eps)
    inv, info = scipy.linalg.lapack.dtrtri(L, lower=1, overwrite_c=1)
    if info != 0:
        return _measure_whitener(S, eps)
    flat = inv.ravel()
    frob, trace = float(flat @ flat), float(np.trace(S))
    if 1.0 / frob > CHOLESKY_MARGIN * eps * trace:
        return inv, True
    a = np.abs(inv)
    inv_norm2 = min(frob, float(a.sum(axis=0).max() * a.sum(axis=1).max()))
    lam_max = min(trace, float(np.abs(S).sum(axis=1).max()))
    if 1.0 / inv_norm2 > CHOLESKY_MARGIN * eps * lam_max:
        return inv, True
    return _measure_whitener(S, eps)


def _measure_whitener(S, eps):
    W = whitener(S, eps)
    return W, W is not None and _lower(W)


def bootstrap_mean_cca(samples, W):
    """Mean CCA (default parameters) of each resample ``W[k]`` (k, G) of sample
    multiplicities, from the re-weighted per-sample blocks; shape (k,)."""
    W = np.asarray(W, dtype=np.float64)
    N, U, V, Paa, Pbb, Pab = samples.weighted_blocks(W)
    eps = rank_cut(samples.dtype)
    da, db = samples.da, samples.db
    out = np.empty(len(W))
    for k in range(len(W)):
        n = float(N[k])         # the scatters about the resample's means, as Moments.from_sums
        Saa = unpacked(Paa[k], da) - np.outer(U[k], U[k]) / n
        Sbb = unpacked(Pbb[k], db) - np.outer(V[k], V[k]) / n
        Sab = Pab[k].reshape(da, db) - np.outer(U[k], V[k]) / n
        (Wa, la), (Wb, lb) = _cholesky_whitener(Saa, eps), _cholesky_whitener(Sbb, eps)
        out[k] = _mean(Sab, Wa, Wb, la and lb)
    return out


def _prepare(samples, resamples):
    if samples.blocks_fit():
        samples.blocks()        # once, before the workers share them


bootstrap_mean_cca.prepare = _prepare
