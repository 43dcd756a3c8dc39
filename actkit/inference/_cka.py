"""Linear CKA of bootstrap resamples without forming their scatter matrices.

With sample multiplicities ``w`` (G,), ``P_s = A_s^T B_s`` (about the means), ``u = sum_s
w_s u_s``, ``v = sum_s w_s v_s`` and ``N = w . n``::

    |S_ab(w)|_F^2 = w^T G_ab w - 2 u^T P(w) v / N + |u|^2 |v|^2 / N^2,
    G_ab[s, t] = <P_s, P_t>,   u^T P(w) v = sum_s w_s sum_{i in s} (a_i . u)(b_i . v),

and the same for ``S_aa`` and ``S_bb``. The three G x G Gram matrices are computed once
(chunks of per-sample blocks, :data:`CHUNK_BYTES` at a time); a resample then costs two
products of the rows with a (D, k) matrix for a batch of ``k`` resamples (with fewer samples
than features, of the rows' products with the sample sums, (n, G), with the (G, k) weights)
and a few G x G quadratic forms: no D x D matrix per resample. Exact (float64), not an
approximation. With a torch ``device`` (:class:`~actkit.inference.Samples`), the one-time
products (the per-sample blocks, the Gram matrices, the rows against the sample sums) run
there.
"""

from __future__ import annotations

import numpy as np

from actkit._threads import current_threads, map_ordered, small_linalg
from actkit.inference._samples import host
from actkit.measures.cka import hsic_unbiased

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
            # the three products on the workers, each one GEMM at one BLAS thread: the same bits
            with small_linalg():
                products = list(map_ordered(lambda k: host(Pi[k] @ Pj[k].T), range(3), current_threads()))
            for k, g in enumerate(products):
                out[k][cuts[i]:cuts[i + 1], cuts[j]:cuts[j + 1]] = g
                out[k][cuts[j]:cuts[j + 1], cuts[i]:cuts[i + 1]] = g.T
    samples._grams = tuple(out)
    return samples._grams


def _row_sums(samples):
    """``(A u^T, B v^T)``, each (n, G): every row against every sample's sum, so that a
    resample's ``A U^T = (A u^T) W^T`` costs n G, not n D, per resample. None where that
    is no cheaper (G at least the narrower width) or they would pass :data:`CHUNK_BYTES`."""
    if samples.G >= min(samples.da, samples.db) or 16 * samples.n * samples.G > CHUNK_BYTES:
        return None
    cached = getattr(samples, "_row_sums", None)
    if cached is None and samples.device_rows() is not None:
        import torch  # torch: ~1.2 s at import (measured); only with a device

        A, B = samples.device_rows()
        u, v = (torch.from_numpy(x).to(samples._device) for x in (samples.u, samples.v))
        cached = samples._row_sums = (host(A @ u.T), host(B @ v.T))
    if cached is None:
        n = samples.n
        spans = [(r, min(n, r + ROW_TASK)) for r in range(0, n, ROW_TASK)]
        parts = list(map_ordered(lambda sp: (samples.A[sp[0]:sp[1]] @ samples.u.T,
                                             samples.B[sp[0]:sp[1]] @ samples.v.T),
                                 spans, current_threads()))
        cached = samples._row_sums = (np.concatenate([p[0] for p in parts]),
                                      np.concatenate([p[1] for p in parts]))
    return cached


#: rows per task of :func:`_row_sums` (a constant, never the thread count)
ROW_TASK = 4096


def _packed(d):
    """Flat indices of the upper triangle of a (d, d) matrix and the weights (1 on the
    diagonal, sqrt(2) off it) with which the packed vectors of two symmetric matrices have
    their Frobenius inner product as a dot product: half the work of the full vectors."""
    iu = np.triu_indices(d)
    return iu[0] * d + iu[1], np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))


def _chunk_on_device(samples, s0, s1):
    """:func:`_chunk` in torch on the samples' device (float64)."""
    import torch  # torch: ~1.2 s at import (measured); only with a device

    (A, B), o, dev = samples.device_rows(), samples.offsets, samples._device
    (fa, wa), (fb, wb) = _packed(samples.da), _packed(samples.db)
    fa, fb = torch.as_tensor(fa, device=dev), torch.as_tensor(fb, device=dev)
    wa, wb = torch.as_tensor(wa, device=dev), torch.as_tensor(wb, device=dev)
    out = [[], [], []]
    for s in range(s0, s1):
        a, b = A[o[s]:o[s + 1]], B[o[s]:o[s + 1]]
        out[0].append((a.T @ a).reshape(-1)[fa] * wa)
        out[1].append((b.T @ b).reshape(-1)[fb] * wb)
        out[2].append((a.T @ b).reshape(-1))
    return [torch.stack(P) for P in out]


#: input samples per task while the per-sample blocks are formed (a constant, never the
#: thread count: each block is one product at one BLAS thread, the same bits at any budget)
BLOCK_TASK = 8


def _chunk(samples, s0, s1):
    if samples._blocks is not None:      # the symmetric blocks packed as here, without the weights
        P = samples._blocks
        return [P[0][s0:s1] * _packed(samples.da)[1], P[1][s0:s1] * _packed(samples.db)[1], P[2][s0:s1]]
    if samples.device_rows() is not None:
        return _chunk_on_device(samples, s0, s1)
    o, A, B, da, db = samples.offsets, samples.A, samples.B, samples.da, samples.db
    (fa, wa), (fb, wb) = _packed(da), _packed(db)
    out = [np.empty((s1 - s0, wa.size)), np.empty((s1 - s0, wb.size)), np.empty((s1 - s0, da * db))]

    def fill(span):
        sq_a, sq_b = np.empty((da, da)), np.empty((db, db))
        for s in range(*span):
            a, b, r = A[o[s]:o[s + 1]], B[o[s]:o[s + 1]], s - s0
            np.matmul(a.T, a, out=sq_a)
            np.matmul(b.T, b, out=sq_b)
            np.take(sq_a.ravel(), fa, out=out[0][r])      # symmetric: the packed upper triangle
            np.take(sq_b.ravel(), fb, out=out[1][r])
            out[0][r] *= wa
            out[1][r] *= wb
            np.matmul(a.T, b, out=out[2][r].reshape(da, db))

    spans = [(t, min(s1, t + BLOCK_TASK)) for t in range(s0, s1, BLOCK_TASK)]
    for _ in map_ordered(fill, spans, current_threads()):
        pass
    return out


def _gram_terms(samples, W):
    """What both CKAs of the resamples ``W`` (k, G) need: ``N`` (k,), the squared Frobenius
    norms ``naa, nbb, nab`` of the resampled centred scatters, ``U, V`` (the resampled sums
    about the full means) and ``taa, tbb, tab`` (``U^T S V`` of the uncentred weighted
    scatters, ``sum_s w_s sum_{i in s} (a_i . U)(b_i . V)``)."""
    W = np.asarray(W, dtype=np.float64)
    Gaa, Gbb, Gab = grams(samples)
    N = W @ samples.n_s
    U, V = W @ samples.u, W @ samples.v                     # (k, Da), (k, Db)
    Z = _row_sums(samples)
    if Z is not None:
        XA, XB = Z[0] @ W.T, Z[1] @ W.T                     # (n, k): A U^T, B V^T
    else:
        XA, XB = samples.A @ U.T, samples.B @ V.T
    starts = samples.offsets[:-1]
    taa = np.einsum("ks,sk->k", W, np.add.reduceat(XA * XA, starts, axis=0))
    tbb = np.einsum("ks,sk->k", W, np.add.reduceat(XB * XB, starts, axis=0))
    tab = np.einsum("ks,sk->k", W, np.add.reduceat(XA * XB, starts, axis=0))
    uu, vv = np.einsum("kd,kd->k", U, U), np.einsum("kd,kd->k", V, V)
    quad = [np.einsum("ks,st,kt->k", W, M, W) for M in (Gaa, Gbb, Gab)]
    naa = quad[0] - 2 * taa / N + uu * uu / N ** 2
    nbb = quad[1] - 2 * tbb / N + vv * vv / N ** 2
    nab = quad[2] - 2 * tab / N + uu * vv / N ** 2
    return dict(W=W, N=N, U=U, V=V, uu=uu, vv=vv, taa=taa, tbb=tbb, tab=tab, naa=naa, nbb=nbb, nab=nab)


def bootstrap_cka(samples, W):
    """Linear CKA of each resample ``W[k]`` (k, G) of sample multiplicities; shape (k,)."""
    t = _gram_terms(samples, W)
    den = np.sqrt(np.maximum(t["naa"], 0) * np.maximum(t["nbb"], 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, t["nab"] / den, np.nan)


bootstrap_cka.prepare = lambda samples, resamples: (grams(samples), _row_sums(samples))


def bootstrap_cka_debiased(samples, W):
    """Debiased linear CKA (:func:`actkit.measures.cka.debiased_cka_from_moments`) of each
    resample ``W[k]``; shape (k,). The Gram route of :func:`bootstrap_cka` gives the squared
    Frobenius norms; the traces and the row-norm terms are re-weighted per-sample sums
    (``samples.raw``), rebased to each resample's means as
    :meth:`~actkit.measures.Moments.from_sums` rebases them, with ``u^T aa(w) u = taa / N^2``."""
    t = _gram_terms(samples, W)
    W, N, U, V = t["W"], t["N"], t["U"], t["V"]
    raw = {k: W @ v for k, v in samples.raw.items()}
    cu, cv = t["uu"] / N ** 2, t["vv"] / N ** 2
    usa, vsb = t["uu"] / N, t["vv"] / N                       # u . sum_a, v . sum_b

    def dot(X, Y):          # u . Y for u = U / N, per resample
        return np.einsum("kd,kd->k", X, Y) / N
    dx2 = (raw["sum_dx2"] - 4 * dot(U, raw["x_dx"]) + 2 * cu * raw["sum_dx"] + 4 * t["taa"] / N ** 2
           - 4 * cu * usa + N * cu * cu)
    dy2 = (raw["sum_dy2"] - 4 * dot(V, raw["y_dy"]) + 2 * cv * raw["sum_dy"] + 4 * t["tbb"] / N ** 2
           - 4 * cv * vsb + N * cv * cv)
    dxdy = (raw["sum_dxdy"] - 2 * dot(V, raw["y_dx"]) + cv * raw["sum_dx"] - 2 * dot(U, raw["x_dy"])
            + 4 * t["tab"] / N ** 2 - 2 * cv * usa + cu * raw["sum_dy"] - 2 * cu * vsb + N * cu * cv)
    ta, tb = raw["sum_dx"] - usa, raw["sum_dy"] - vsb          # tr Saa(w), tr Sbb(w)
    hxy = hsic_unbiased(N, t["nab"] - dxdy, ta, tb, dxdy)
    hxx = hsic_unbiased(N, t["naa"] - dx2, ta, ta, dx2)
    hyy = hsic_unbiased(N, t["nbb"] - dy2, tb, tb, dy2)
    ok = (hxx > 0) & (hyy > 0) & (N >= 4)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, hxy / np.sqrt(np.where(ok, hxx * hyy, 1.0)), np.nan)


bootstrap_cka_debiased.prepare = bootstrap_cka.prepare
