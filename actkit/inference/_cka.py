"""Linear CKA of bootstrap resamples without forming their scatter matrices.

With sample multiplicities ``w`` (G,), ``P_s = A_s^T B_s`` (about the means), ``u = sum_s
w_s u_s``, ``v = sum_s w_s v_s`` and ``N = w . n``::

    |S_ab(w)|_F^2 = w^T G_ab w - 2 u^T P(w) v / N + |u|^2 |v|^2 / N^2,
    G_ab[s, t] = <P_s, P_t>,   u^T P(w) v = sum_s w_s sum_{i in s} (a_i . u)(b_i . v),

and the same for ``S_aa`` and ``S_bb``. The three G x G Gram matrices are computed once
(chunks of per-sample blocks, :data:`CHUNK_BYTES` at a time); a resample then costs two
products of the rows with a (D, k) matrix for a batch of ``k`` resamples and a few G x G
quadratic forms: no D x D matrix per resample. Exact (float64), not an approximation.
"""

from __future__ import annotations

import numpy as np

#: bytes of per-sample blocks formed at once while the Gram matrices are computed
CHUNK_BYTES = 1 << 28


def gram_fits(samples, resamples):
    """Whether the Gram route is the cheaper exact one: its G x G matrices fit easily and
    forming them (~G^2 D^2) costs less than the weighted products (~resamples n D^2)."""
    G = samples.G
    return 24 * G * G <= (1 << 28) and G * G <= resamples * samples.n


def grams(samples):
    """``(G_aa, G_bb, G_ab)``, each (G, G): inner products of the per-sample blocks."""
    cached = getattr(samples, "_grams", None)
    if cached is not None:
        return cached
    G = samples.G
    width = max(samples.da ** 2, samples.db ** 2, samples.da * samples.db)
    c = max(1, CHUNK_BYTES // (8 * width))
    out = [np.zeros((G, G)) for _ in range(3)]
    cuts = list(range(0, G, c)) + [G]
    for i in range(len(cuts) - 1):
        Pi = _chunk(samples, cuts[i], cuts[i + 1])
        for j in range(i, len(cuts) - 1):
            Pj = Pi if j == i else _chunk(samples, cuts[j], cuts[j + 1])
            for k in range(3):
                g = Pi[k] @ Pj[k].T
                out[k][cuts[i]:cuts[i + 1], cuts[j]:cuts[j + 1]] = g
                out[k][cuts[j]:cuts[j + 1], cuts[i]:cuts[i + 1]] = g.T
    samples._grams = tuple(out)
    return samples._grams


def _packed(d):
    """Indices of the upper triangle of a (d, d) matrix and the weights (1 on the diagonal,
    sqrt(2) off it) with which the packed vectors of two symmetric matrices have their
    Frobenius inner product as a dot product: half the work of the full vectors."""
    iu = np.triu_indices(d)
    return iu, np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))


def _chunk(samples, s0, s1):
    if samples._blocks is not None:
        return [P[s0:s1] for P in samples._blocks]
    o, A, B = samples.offsets, samples.A, samples.B
    (ia, wa), (ib, wb) = _packed(samples.da), _packed(samples.db)
    out = [np.empty((s1 - s0, wa.size)), np.empty((s1 - s0, wb.size)),
           np.empty((s1 - s0, samples.da * samples.db))]
    for r, s in enumerate(range(s0, s1)):
        a, b = A[o[s]:o[s + 1]], B[o[s]:o[s + 1]]
        out[0][r] = (a.T @ a)[ia] * wa         # symmetric: the packed upper triangle
        out[1][r] = (b.T @ b)[ib] * wb
        out[2][r] = (a.T @ b).ravel()
    return out


def bootstrap_cka(samples, W):
    """Linear CKA of each resample ``W[k]`` (k, G) of sample multiplicities; shape (k,)."""
    W = np.asarray(W, dtype=np.float64)
    Gaa, Gbb, Gab = grams(samples)
    N = W @ samples.n_s
    U, V = W @ samples.u, W @ samples.v                     # (k, Da), (k, Db)
    XA, XB = samples.A @ U.T, samples.B @ V.T               # (n, k)
    starts = samples.offsets[:-1]
    taa = np.einsum("ks,sk->k", W, np.add.reduceat(XA * XA, starts, axis=0))
    tbb = np.einsum("ks,sk->k", W, np.add.reduceat(XB * XB, starts, axis=0))
    tab = np.einsum("ks,sk->k", W, np.add.reduceat(XA * XB, starts, axis=0))
    uu, vv = np.einsum("kd,kd->k", U, U), np.einsum("kd,kd->k", V, V)
    quad = [np.einsum("ks,st,kt->k", W, M, W) for M in (Gaa, Gbb, Gab)]
    naa = quad[0] - 2 * taa / N + uu * uu / N ** 2
    nbb = quad[1] - 2 * tbb / N + vv * vv / N ** 2
    nab = quad[2] - 2 * tab / N + uu * vv / N ** 2
    den = np.sqrt(np.maximum(naa, 0) * np.maximum(nbb, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, nab / den, np.nan)


bootstrap_cka.prepare = lambda samples, resamples: grams(samples)
