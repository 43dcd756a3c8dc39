"""Distances between two softmax models (Nielsen et al. 2025), ``docs/definitions.md`` §4.

Model ``k``: ``p_k(y|x) = softmax_y(f_k(x)^T g_k(y))`` with embeddings ``f_k`` (N x M) and
unembeddings ``g_k`` (C x M). For a causal LM, ``f`` is the final hidden state after the final
norm and ``g`` the rows of the lm_head for a subset of C labels (tokens); the softmax is then
over that subset.

- ``d_kl``: (1/N) sum_n KL(p_1(.|x_n) || p_2(.|x_n)).
- ``d_llv``: the log-likelihood variance distance, max(T1, T2, lambda T3, lambda T4), with the
  label pivot / left-out label chosen to minimise T1 and the input pivot + M inputs chosen as
  the best of ``num_samples`` random draws (minimising T2). All variances ddof=1.
- ``d_svd_f``, ``d_svd_g``: 1 - m_SVD of the standardised log-odds coordinates of the
  embeddings (resp. unembeddings), PLS-SVD with M components. As the official code:
  ``d_svd_f`` is the max over **every** M-subset of the diversity labels when there are at
  most ``max_subsets`` of them (else over ``n_subsets`` random ones), ``d_svd_g`` uses the
  input set d_LLV chose (the set Theorem 4.7's bound covers).
- ``bound``: 2 M d_llv (Thm 4.7: d_LLV <= eps implies d_{f,g} <= 2 M eps).
"""

from __future__ import annotations

import functools
from itertools import combinations
from math import comb

import numpy as np

from actkit._groups import check_same_rows
from actkit._rows import sample_rows
from actkit._threads import small_linalg
from actkit.errors import StoreError, ValidationError
from actkit.metrics._inputs import as_2d

__all__ = ["softmax_distances", "softmax_distances_from_stores"]

LAMBDA = 1e-5


def _log_softmax(f, g):
    logits = f @ g.T
    logits -= logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def _sd(x, axis):
    return np.std(x, axis=axis, ddof=1)


def _pair_terms(l1, l2):
    """Symmetric (C, C) matrix w[i, j] = max(a(i; j), a(j; i)) and the sds sigma_k(i, j).

    ``a(i; j) = sd_x[l1(i)/sigma1(i, j) - l2(i)/sigma2(i, j)]`` with
    ``sigma_k(i, j) = sd_x[l_k(i) - l_k(j)]``: a(y) of pivot j at label y = i, and b(y) of
    pivot j at label i is a(j; i). Each unordered pair is computed once, so the T1 of two
    pivots that share their binding pair tie exactly and the first pivot wins, as in the
    official code (the choice used to follow the last bit of rounding). NaN where a sigma is 0.
    """
    C = l1.shape[1]
    w = np.full((C, C), np.nan)
    s1 = np.zeros((C, C))
    s2 = np.zeros((C, C))
    for i in range(C - 1):
        j = np.arange(i + 1, C)
        d1, d2 = _sd(l1[:, j] - l1[:, [i]], 0), _sd(l2[:, j] - l2[:, [i]], 0)
        s1[i, j] = s1[j, i] = d1
        s2[i, j] = s2[j, i] = d2
        ok = (d1 > 0) & (d2 > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            a_ij = _sd(l1[:, [i]] / d1 - l2[:, [i]] / d2, 0)
            a_ji = _sd(l1[:, j] / d1 - l2[:, j] / d2, 0)
        m = np.where(ok, np.maximum(a_ij, a_ji), np.nan)
        w[i, j] = w[j, i] = m
    return w, s1, s2


def _label_side(l1, l2):
    """Pivot label y0 and left-out y_lo minimising T1; returns (T1, T3, y0, y_lo, R).

    As the official code: the first pivot (then the first left-out label) in index order
    among equal T1 values.
    """
    C = l1.shape[1]
    w, s1, s2 = _pair_terms(l1, l2)
    best = None
    for y0 in range(C):
        others = np.flatnonzero(~np.isnan(w[y0]))
        if others.size < 2:
            continue
        m = w[y0, others]
        worst = int(np.argmax(m))
        t1 = float(np.max(np.delete(m, worst)))
        if best is None or t1 < best[0]:
            keep = np.delete(others, worst)
            t3 = float(np.max(np.abs(s1[y0, keep] - s2[y0, keep])))
            best = (t1, t3, y0, int(others[worst]), keep)
    if best is None:
        raise ValidationError("the log-probabilities do not vary over inputs for enough labels: "
                         "d_LLV is undefined (need at least 3 labels that vary)")
    return best


def _input_side(l1, l2, M, num_samples, rng):
    """Input pivot x0 + M inputs, best of ``num_samples`` draws minimising max T2."""
    N = l1.shape[0]
    best = None
    for _ in range(num_samples):
        idx = rng.choice(N, size=M + 1, replace=False)
        x0, xs = idx[0], idx[1:]
        d1 = l1[xs] - l1[x0]
        d2 = l2[xs] - l2[x0]
        s1, s2 = _sd(d1, 1), _sd(d2, 1)                     # (M,)
        if np.any(s1 <= 0) or np.any(s2 <= 0):
            continue
        c = _sd(l1[xs] / s1[:, None] - l2[xs] / s2[:, None], 1)
        e = _sd(l1[x0][None, :] / s1[:, None] - l2[x0][None, :] / s2[:, None], 1)
        t2 = float(np.max(np.maximum(c, e)))
        if best is None or t2 < best[0]:
            best = (t2, float(np.max(np.abs(s1 - s2))), int(x0), xs)
    if best is None:
        raise ValidationError("no draw of inputs gave log-probabilities that vary over labels: "
                         "d_LLV is undefined")
    return best


def _m_svd(U1, U2):
    """Mean covariance of paired PLS-SVD scores of column-standardised U1, U2 (n x M)."""
    from sklearn.cross_decomposition import PLSSVD  # sklearn.cross_decomposition: ~1 s at import (measured)

    M = U1.shape[1]
    sd1, sd2 = U1.std(0, ddof=1), U2.std(0, ddof=1)
    if np.any(sd1 <= 0) or np.any(sd2 <= 0):
        return 0.0
    U1 = (U1 - U1.mean(0)) / sd1
    U2 = (U2 - U2.mean(0)) / sd2
    pls = PLSSVD(n_components=M, scale=False).fit(U1, U2)
    xs, ys = pls.transform(U1, U2)
    xs, ys = xs - xs.mean(0), ys - ys.mean(0)
    cov = (xs * ys).sum(0) / (U1.shape[0] - 1)
    return float(np.mean(cov))


def _subsets(pool, M, n_subsets, rng):
    pool = np.asarray(pool)
    if pool.size < M:
        return []
    if pool.size == M:
        return [pool]
    return [sample_rows(pool, M, rng) for _ in range(n_subsets)]


#: ``svd_label_subsets="all"`` enumerates every M-subset up to this many (official code).
MAX_SUBSETS = 5000

LABEL_SUBSETS = ("all", "random")
INPUT_SETS = ("chosen", "random")


def _label_subsets(pool, M, how, n_subsets, max_subsets, rng):
    """The M-subsets of the diversity labels d_SVD(f) maximises over, and whether all."""
    pool = np.asarray(pool)
    if how == "all" and pool.size >= M and comb(pool.size, M) <= max_subsets:
        return [np.array(J) for J in combinations(pool.tolist(), M)], True
    subsets = _subsets(pool, M, n_subsets, rng)
    return subsets, pool.size == M


def _one_blas_thread(fn):
    """Run ``fn`` at one BLAS thread: the products over the N inputs (PLS-SVD's cross
    products) then add their rows in one order, so the distances have the same bits at any
    thread count (a 2-thread OpenBLAS changed the last bit of d_svd_f)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with small_linalg():
            return fn(*args, **kwargs)

    return wrapper


@_one_blas_thread
def softmax_distances(f1, g1, f2, g2, *, lam=LAMBDA, num_samples=100, n_subsets=20,
                      random_state=0, svd_label_subsets="all", svd_input_sets="chosen",
                      max_subsets=MAX_SUBSETS):
    """Distances between two softmax models on the same N inputs and C labels.

    Parameters
    ----------
    f1, f2 : array-like of shape (n_inputs, M)
        Embeddings of the two models (same inputs, same M).
    g1, g2 : array-like of shape (n_labels, M)
        Unembeddings (same labels, in the same order).
    lam : float, default=1e-5
        The paper's lambda weighting T3 and T4 in d_LLV.
    num_samples : int, default=100
        Random draws of (input pivot, M inputs) for d_LLV's input side (paper: 100-200).
    n_subsets : int, default=20
        Random M-subsets of labels (resp. inputs) over which d_SVD takes its max, where
        the options below draw them at random.
    random_state : int, default=0
    svd_label_subsets : {"all", "random"}, default="all"
        d_SVD(f)'s M-subsets of the diversity labels R. ``"all"`` (the official code):
        every one of the C(|R|, M) subsets when there are at most ``max_subsets``, else
        ``n_subsets`` random ones (``svd_f_enumerated`` says which); ``"random"`` (actkit
        0.1): ``n_subsets`` random ones, which can miss the worst subset.
    svd_input_sets : {"chosen", "random"}, default="chosen"
        d_SVD(g)'s input sets. ``"chosen"`` (the official code): the M inputs d_LLV chose,
        the set Theorem 4.7's bound covers; ``"random"`` (actkit 0.1): that set and
        ``n_subsets - 1`` random M-subsets of the inputs, maximised over.
    max_subsets : int, default=5000

    Returns
    -------
    dict
        ``d_kl``, ``d_llv``, ``d_svd_f``, ``d_svd_g``, ``bound`` (= 2 M d_llv) and the
        details ``t1``..``t4``, ``pivot_label``, ``left_out_label``, ``pivot_input``, ``M``,
        ``lam``.

    Notes
    -----
    Conventions **[actkit]** where the spec is silent: the input-side standard deviations
    ``sd_y`` run over all C labels; d_SVD's label subsets come from R = labels minus
    {pivot, left out} and (``svd_input_sets="random"``) its input subsets from all inputs
    but the input pivot. ``docs/definitions.md`` writes every formula out.
    """
    f1, g1 = as_2d(f1, "f1").astype(np.float64), as_2d(g1, "g1").astype(np.float64)
    f2, g2 = as_2d(f2, "f2").astype(np.float64), as_2d(g2, "g2").astype(np.float64)
    if f1.shape[0] != f2.shape[0]:
        raise ValidationError(f"f1 and f2 must have the same inputs (rows), got {f1.shape[0]} and {f2.shape[0]}")
    if g1.shape[0] != g2.shape[0]:
        raise ValidationError(f"g1 and g2 must have the same labels (rows), got {g1.shape[0]} and {g2.shape[0]}")
    if f1.shape[1] != g1.shape[1] or f2.shape[1] != g2.shape[1]:
        raise ValidationError("each model's f and g must have the same representation dimension M")
    if f1.shape[1] != f2.shape[1]:
        raise ValidationError(f"the two models must have the same representation dimension M, got "
                         f"{f1.shape[1]} and {f2.shape[1]}")
    N, M = f1.shape
    C = g1.shape[0]
    if C < M + 2:
        raise ValidationError(f"need at least M + 2 = {M + 2} labels for d_LLV and d_SVD, got {C}")
    if N < M + 2:
        raise ValidationError(f"need at least M + 2 = {M + 2} inputs, got {N}")
    if svd_label_subsets not in LABEL_SUBSETS:
        raise ValidationError(f"svd_label_subsets must be one of {LABEL_SUBSETS}, got {svd_label_subsets!r}")
    if svd_input_sets not in INPUT_SETS:
        raise ValidationError(f"svd_input_sets must be one of {INPUT_SETS}, got {svd_input_sets!r}")
    rng = np.random.default_rng(random_state)
    l1, l2 = _log_softmax(f1, g1), _log_softmax(f2, g2)

    d_kl = float(np.mean(np.sum(np.exp(l1) * (l1 - l2), axis=1)))

    t1, t3, y0, y_lo, R = _label_side(l1, l2)
    t2, t4, x0, xs = _input_side(l1, l2, M, num_samples, rng)
    d_llv = max(t1, t2, lam * t3, lam * t4)

    # d_SVD, embedding side: U_k = f_k L_k^T, L_k = [g_k(y_j) - g_k(y0)]_{j in J}
    d_f = 0.0
    label_sets, enumerated = _label_subsets(R, M, svd_label_subsets, n_subsets, max_subsets, rng)
    for J in label_sets:
        U1 = f1 @ (g1[J] - g1[y0]).T
        U2 = f2 @ (g2[J] - g2[y0]).T
        d_f = max(d_f, 1.0 - _m_svd(U1, U2))
    # unembedding side: V_k = g_k N_k^T, N_k = [f_k(x_i) - f_k(x0)]_{i in I}
    d_g = 0.0
    pool = np.delete(np.arange(N), x0)
    input_sets = [xs] + (_subsets(pool, M, n_subsets - 1, rng) if svd_input_sets == "random" else [])
    for I in input_sets:
        V1 = g1 @ (f1[I] - f1[x0]).T
        V2 = g2 @ (f2[I] - f2[x0]).T
        d_g = max(d_g, 1.0 - _m_svd(V1, V2))

    return {
        "d_kl": d_kl,
        "d_llv": float(d_llv),
        "d_svd_f": float(d_f),
        "d_svd_g": float(d_g),
        "bound": float(2 * M * d_llv),
        "t1": t1, "t2": t2, "t3": t3, "t4": t4,
        "pivot_label": int(y0), "left_out_label": int(y_lo), "pivot_input": int(x0),
        "M": int(M), "lam": float(lam),
        "svd_f_subsets": len(label_sets), "svd_f_enumerated": bool(enumerated),
        "svd_g_input_sets": len(input_sets), "chosen_inputs": [int(i) for i in xs],
        "svd_label_subsets": svd_label_subsets, "svd_input_sets": svd_input_sets,
    }


def softmax_distances_from_stores(store_a, store_b, labels, *, layer="final_hidden",
                                  param="unembedding", random_state=0, **kwargs):
    """:func:`softmax_distances` of two causal LMs from their extraction stores.

    Each store must hold the final hidden state (``layer``, one row per input token) and the
    lm_head rows (``param``); ``actkit extract ... --layers final_hidden --unembedding`` writes
    both. The softmax is over the given label (token) ids.

    Parameters
    ----------
    store_a, store_b : actkit.store.Store
        Stores of the same inputs (same rows).
    labels : array-like of int, shape (C,)
        Label (token) ids, at least 3, each in ``[0, vocabulary size)``.
    layer, param : str
        Names of the embedding layer and the unembedding parameter.
    random_state : int, default=0
    **kwargs
        Passed to :func:`softmax_distances`.

    Returns
    -------
    dict
        As :func:`softmax_distances`.

    Raises
    ------
    StoreError
        A store lacks the layer or the parameter, or an id is out of range.
    ValidationError
        The stores were extracted from other inputs (:func:`actkit._groups.check_same_rows`).
    """
    ids = np.asarray(labels)
    if ids.ndim != 1 or ids.size < 3 or ids.dtype.kind not in "iu":
        raise ValidationError("labels must be at least 3 integer label ids")
    check_same_rows([store_a, store_b], [getattr(s, "path", name) for s, name in ((store_a, "A"), (store_b, "B"))])
    fg = []
    for store in (store_a, store_b):
        path = getattr(store, "path", "a store")
        if layer not in store.layers or param not in store.params:
            raise StoreError(f"{path} lacks the {layer!r} layer or the {param!r} "
                             f"parameter; extract with --layers final_hidden --unembedding")
        g = store.params[param]
        if ids.min() < 0 or ids.max() >= g.shape[0]:
            raise StoreError(f"--softmax-labels ids must be in [0, {g.shape[0]}) for {path}")
        fg.append((np.asarray(store[layer], dtype=np.float64), g[ids].astype(np.float64)))
    (f1, g1), (f2, g2) = fg
    return softmax_distances(f1, g1, f2, g2, random_state=random_state, **kwargs)
