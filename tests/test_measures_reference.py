"""Each measure of actkit.measures equals its reference implementation to 1e-6 (float64),
run side by side on data drawn here (issue 31).

Installed references (the ``test`` extra): dcor, rsatoolbox, scikit-learn. The others are
short and not installable as published (Kornblith et al.'s CKA notebook, google/svcca's
``cca_core`` / ``pwcca`` and tutorial recipe, netrep's ``LinearMetric``, platonic-rep's
``metrics.py``, ReSi's ``jaccard_similarity``, Ding et al.'s Procrustes, Harvey et al.'s
Bures similarity): their formulas are written out below as the papers and repositories
state them, the reference side of each test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import actkit

TOL = 1e-6


def _pair(seed=0, n=400, p=12, q=9, latent=6, noise=0.3):
    rng = np.random.default_rng(seed)
    Z = rng.laplace(size=(n, latent))
    A = Z @ rng.normal(size=(latent, p)) + noise * rng.normal(size=(n, p)) + 2.0
    B = np.tanh(Z @ rng.normal(size=(latent, q)) / 2) + noise * rng.normal(size=(n, q)) - 1.0
    return A, B


def _m(A, B, name, **params):
    return actkit.measure(A, B, name, max_rows=None, **params)


# --- Kornblith et al. 2019, the CKA notebook ----------------------------------------------

def _gram_linear(x):
    return x @ x.T


def _gram_rbf(x, threshold=1.0):
    dot = x @ x.T
    sq = np.diag(dot)
    sqd = -2 * dot + sq[:, None] + sq[None, :]
    return np.exp(-sqd / (2 * threshold ** 2 * np.median(sqd)))


def _center_gram(gram, unbiased=False):
    gram = gram.copy()
    n = gram.shape[0]
    if unbiased:
        np.fill_diagonal(gram, 0)
        means = np.sum(gram, 0) / (n - 2)
        means -= np.sum(means) / (2 * (n - 1))
        gram -= means[:, None]
        gram -= means[None, :]
        np.fill_diagonal(gram, 0)
    else:
        means = np.mean(gram, 0)
        means -= np.mean(means) / 2
        gram -= means[:, None]
        gram -= means[None, :]
    return gram


def _cka(gx, gy, debiased=False):
    gx, gy = _center_gram(gx, debiased), _center_gram(gy, debiased)
    return gx.ravel() @ gy.ravel() / (np.linalg.norm(gx) * np.linalg.norm(gy))


def _debiased_helper(xty, sx, sy, nx, ny, n):
    return xty - n / (n - 2.0) * sx @ sy + nx * ny / ((n - 1) * (n - 2))


def _feature_space_linear_cka(x, y, debiased=False):
    x = x - x.mean(0, keepdims=True)
    y = y - y.mean(0, keepdims=True)
    dot = np.linalg.norm(x.T @ y) ** 2
    nx, ny = np.linalg.norm(x.T @ x), np.linalg.norm(y.T @ y)
    if debiased:
        n = x.shape[0]
        sx, sy = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
        qx, qy = sx.sum(), sy.sum()
        dot = _debiased_helper(dot, sx, sy, qx, qy, n)
        nx = np.sqrt(_debiased_helper(nx ** 2, sx, sx, qx, qx, n))
        ny = np.sqrt(_debiased_helper(ny ** 2, sy, sy, qy, qy, n))
    return dot / (nx * ny)


@pytest.mark.parametrize("debiased", [False, True])
def test_linear_cka_equals_kornblith(debiased):
    A, B = _pair(1)
    ref = _feature_space_linear_cka(A, B, debiased)
    assert ref == pytest.approx(_cka(_gram_linear(A), _gram_linear(B), debiased), abs=1e-9)
    name = "linear_cka_debiased" if debiased else "linear_cka"
    assert abs(_m(A, B, name) - ref) < TOL


@pytest.mark.parametrize("sigma", [0.8, 0.5])
def test_rbf_cka_equals_kornblith_gram_rbf(sigma):
    A, B = _pair(2, n=201)            # odd and even n: the median of n^2 distances
    ref = _cka(_gram_rbf(A, sigma), _gram_rbf(B, sigma))
    assert abs(_m(A, B, "rbf_cka", sigma=sigma) - ref) < TOL
    A2, B2 = A[:200], B[:200]
    assert abs(_m(A2, B2, "rbf_cka", sigma=sigma) - _cka(_gram_rbf(A2, sigma), _gram_rbf(B2, sigma))) < TOL


# --- google/svcca: cca_core.get_cca_similarity, the tutorial's SVCCA, pwcca ------------------

def _google_cca(acts1, acts2, epsilon=0.0):
    """cca_core.get_cca_similarity's computation (neurons x datapoints): covariance scaled by
    its largest entry, small neurons removed, epsilon on the diagonal, pinv, its square root,
    the SVD. Returns (u, s, x_idxs, neuron means of acts1)."""
    numx = acts1.shape[0]
    cov = np.cov(acts1, acts2)
    sxx, sxy, syy = cov[:numx, :numx], cov[:numx, numx:], cov[numx:, numx:]
    xmax, ymax = np.max(np.abs(sxx)), np.max(np.abs(syy))
    sxx, syy, sxy = sxx / xmax, syy / ymax, sxy / np.sqrt(xmax * ymax)
    xi, yi = np.abs(np.diag(sxx)) >= epsilon, np.abs(np.diag(syy)) >= epsilon
    sxx, sxy, syy = sxx[xi][:, xi], sxy[xi][:, yi], syy[yi][:, yi]
    sxx = sxx + epsilon * np.eye(sxx.shape[0])
    syy = syy + epsilon * np.eye(syy.shape[0])

    def invsqrt(S):
        w, v = np.linalg.eigh(np.linalg.pinv(S))
        return v @ np.diag(np.sqrt(w)) @ v.T

    u, s, _ = np.linalg.svd(invsqrt(sxx) @ sxy @ invsqrt(syy))
    return u, np.abs(s), xi, acts1.mean(1, keepdims=True)


def _svcca_tutorial(A, B, keep=0.99):
    """The tutorial's recipe with the fewest directions holding ``keep`` of the variance."""
    def reduce(X):
        c = X.T - X.T.mean(1, keepdims=True)
        _, s, V = np.linalg.svd(c, full_matrices=False)
        k = int(np.argmax(np.cumsum(s ** 2) / np.sum(s ** 2) >= keep)) + 1
        return s[:k, None] * V[:k]
    return float(np.mean(_google_cca(reduce(A), reduce(B), epsilon=1e-10)[1]))


def _google_pwcca(acts1, acts2):
    """pwcca.compute_pwcca for acts1 not wider than acts2 (its branch that runs)."""
    u, s, xi, m1 = _google_cca(acts1, acts2)
    dirns = u.T @ (acts1[xi] - m1[xi]) + m1[xi]
    P, _ = np.linalg.qr(dirns.T)
    w = np.sum(np.abs(P.T @ acts1[xi].T), axis=1)
    w = w / w.sum()
    return float(np.sum(w * s))


def _pwcca_paper(A, B):
    """Morcos et al. 2018: alpha_i = sum_j |<h_i, a_j>| with h_i A's unit canonical variates."""
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    Qa, Qb = np.linalg.qr(Ac)[0], np.linalg.qr(Bc)[0]
    U, rho, _ = np.linalg.svd(Qa.T @ Qb, full_matrices=False)
    H = Qa @ U
    alpha = np.abs(H.T @ Ac).sum(1)
    return float(np.sum(alpha * rho) / alpha.sum())


def test_mean_cca_equals_sklearn_cca():
    from sklearn.cross_decomposition import CCA

    A, B = _pair(3, n=500, p=5, q=4, latent=4)
    cca = CCA(n_components=4, scale=False, max_iter=20000, tol=1e-15).fit(A, B)
    xs, ys = cca.transform(A, B)
    ref = np.mean([np.corrcoef(xs[:, i], ys[:, i])[0, 1] for i in range(4)])
    assert abs(_m(A, B, "mean_cca") - ref) < TOL


def test_svcca_equals_the_google_tutorial_recipe():
    rng = np.random.default_rng(4)
    Z = rng.normal(size=(600, 5)) * np.array([5, 4, 3, 2, 1.5])
    A = Z @ rng.normal(size=(5, 20)) + 0.01 * rng.normal(size=(600, 20))
    B = np.tanh(Z @ rng.normal(size=(5, 15)) / 4) + 0.01 * rng.normal(size=(600, 15))
    for keep in (0.99, 0.9):
        assert abs(_m(A, B, "svcca", keep=keep) - _svcca_tutorial(A, B, keep)) < TOL


def test_pwcca_equals_google_where_its_deviations_vanish_and_the_paper_always():
    A, B = _pair(5, n=500, p=6, q=9)
    # google's projection skips the whitening and adds the neuron means back: both vanish
    # for an exactly white, centred A (and its code runs only when A is not the wider side)
    Aw = np.linalg.qr(A - A.mean(0))[0] * 3.0
    assert abs(_m(Aw, B, "pwcca") - _google_pwcca(Aw.T, B.T)) < TOL
    for X, Y in ((A, B), (B, A)):         # A wider than B too (google's code fails there)
        assert abs(_m(X, Y, "pwcca") - _pwcca_paper(X, Y)) < TOL


# --- shape metrics: Ding et al., netrep, Harvey et al. ---------------------------------------

def _procrustes_ding(A, B):
    A, B = A - A.mean(0), B - B.mean(0)
    A, B = A / np.linalg.norm(A), B / np.linalg.norm(B)
    return 2 - 2 * np.linalg.svd(A.T @ B, compute_uv=False).sum()


def _netrep_angular(X, Y, alpha):
    """netrep LinearMetric(alpha, score_method="angular", zero_pad=True).fit_score(X, Y)."""
    n = max(X.shape[1], Y.shape[1])
    X = np.pad(X, ((0, 0), (0, n - X.shape[1])))
    Y = np.pad(Y, ((0, 0), (0, n - Y.shape[1])))

    def whiten(Z):
        if alpha > 1 - 1e-7:
            return Z
        lam, V = np.linalg.eigh(Z.T @ Z)
        lam = np.maximum(lam, 1e-7)
        d = alpha + (1 - alpha) * lam ** -0.5
        return Z @ (V * d) @ V.T
    Xw, Yw = whiten(X - X.mean(0)), whiten(Y - Y.mean(0))
    U, _, Vt = np.linalg.svd(Xw.T @ Yw)
    tX, tY = Xw @ U, Yw @ Vt.T
    corr = tX.ravel() @ tY.ravel() / (np.linalg.norm(tX) * np.linalg.norm(tY))
    return float(np.arccos(np.clip(corr, -1, 1)))


def test_procrustes_and_bures_equal_their_published_formulas():
    A, B = _pair(6)
    ref = _procrustes_ding(A, B)
    assert abs(_m(A, B, "procrustes") - ref) < TOL
    assert abs(_m(A, B, "bures") - (1 - ref / 2)) < TOL     # the normalized Bures similarity
    assert abs(_m(A, B, "shape_metric") - np.arccos(_m(A, B, "bures"))) < TOL


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_shape_metric_equals_netrep(alpha):
    A, B = _pair(7, n=500, p=8, q=6)            # unequal widths: zero-padded as netrep does
    assert abs(_m(A, B, "shape_metric", alpha=alpha) - _netrep_angular(A, B, alpha)) < TOL
    B2 = B @ np.random.default_rng(0).normal(size=(6, 8))
    assert abs(_m(A, B2, "shape_metric", alpha=alpha) - _netrep_angular(A, B2, alpha)) < TOL


# --- RSA: rsatoolbox ----------------------------------------------------------------------

@pytest.mark.parametrize("method,ref_method", [("spearman", "spearman"), ("pearson", "corr")])
def test_rsa_equals_rsatoolbox(method, ref_method):
    from rsatoolbox.data import Dataset
    from rsatoolbox.rdm import calc_rdm, compare

    A, B = _pair(8, n=120)
    ra = calc_rdm(Dataset(A), method="correlation")
    rb = calc_rdm(Dataset(B), method="correlation")
    ref = float(compare(ra, rb, method=ref_method)[0, 0])
    assert abs(_m(A, B, "rsa", method=method) - ref) < TOL


# --- neighbourhoods: platonic-rep metrics.py, ReSi ------------------------------------------

def _platonic_knn(feats, topk):
    return (feats @ feats.T).fill_diagonal_(-1e8).argsort(dim=1, descending=True)[:, :topk]


def _platonic_mutual_knn(fa, fb, topk):
    ka, kb = _platonic_knn(fa, topk), _platonic_knn(fb, topk)
    n = ka.shape[0]
    r = torch.arange(n).unsqueeze(1)
    ma, mb = torch.zeros(n, n, dtype=fa.dtype), torch.zeros(n, n, dtype=fa.dtype)
    ma[r, ka] = 1.0
    mb[r, kb] = 1.0
    return ((ma * mb).sum(dim=1) / topk).mean().item()


def _hsic_unbiased(K, L):
    m = K.shape[0]
    Kt, Lt = K.clone().fill_diagonal_(0), L.clone().fill_diagonal_(0)
    v = (torch.sum(Kt * Lt.T) + torch.sum(Kt) * torch.sum(Lt) / ((m - 1) * (m - 2))
         - 2 * torch.sum(torch.mm(Kt, Lt)) / (m - 2))
    return v / (m * (m - 3))


def _platonic_cknna(fa, fb, topk):
    n = fa.shape[0]
    K, L = fa @ fa.T, fb @ fb.T

    def similarity(K, L):
        Kh, Lh = K.clone().fill_diagonal_(float("-inf")), L.clone().fill_diagonal_(float("-inf"))
        _, ik = torch.topk(Kh, topk, dim=1)
        _, il = torch.topk(Lh, topk, dim=1)
        mk = torch.zeros(n, n, dtype=K.dtype).scatter_(1, ik, 1)
        ml = torch.zeros(n, n, dtype=K.dtype).scatter_(1, il, 1)
        mask = mk * ml
        return _hsic_unbiased(mask * K, mask * L)
    kl, kk, ll = similarity(K, L), similarity(K, K), similarity(L, L)
    return kl.item() / (torch.sqrt(kk * ll) + 1e-6).item()


def _normalised(X):
    return torch.nn.functional.normalize(torch.from_numpy(X), dim=-1)


@pytest.mark.parametrize("k", [10, 3])
def test_mutual_knn_and_cknna_equal_platonic_rep(k):
    A, B = _pair(9, n=300)
    fa, fb = _normalised(A), _normalised(B)
    assert abs(_m(A, B, "mutual_knn", k=k) - _platonic_mutual_knn(fa, fb, k)) < TOL
    assert abs(_m(A, B, "cknna", k=k) - _platonic_cknna(fa, fb, k)) < TOL


def test_jaccard_knn_equals_resi():
    from sklearn.neighbors import NearestNeighbors

    A, B = _pair(10, n=300)

    def sets(X, k):   # ReSi: k + 1 cosine neighbours, the point itself dropped
        idx = NearestNeighbors(n_neighbors=k + 1, metric="cosine").fit(X).kneighbors(X)[1][:, 1:]
        return [set(r) for r in idx]
    for k in (10, 4):
        sa, sb = sets(A, k), sets(B, k)
        ref = np.mean([len(x & y) / len(x | y) for x, y in zip(sa, sb)])
        assert abs(_m(A, B, "jaccard_knn", k=k) - ref) < TOL


# --- dcor ---------------------------------------------------------------------------------

def test_dcor_equals_the_dcor_package():
    import dcor

    A, B = _pair(11, n=1500)           # more than one block of rows
    assert abs(_m(A, B, "dcor") - dcor.distance_correlation(A, B)) < TOL
    assert abs(_m(A, B, "dcor", unbiased=True) - dcor.u_distance_correlation_sqr(A, B)) < TOL


# --- linear_r2: sklearn -------------------------------------------------------------------

def test_linear_r2_equals_sklearn_on_the_held_out_half():
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import r2_score

    A, B = _pair(12)
    perm = np.random.default_rng(3).permutation(len(A))
    test, fit = perm[: len(A) // 2], perm[len(A) // 2:]
    ref = r2_score(B[test], LinearRegression().fit(A[fit], B[fit]).predict(A[test]))
    assert abs(_m(A, B, "linear_r2", random_state=3) - ref) < TOL
    assert abs(actkit.metrics.linear_r2(A, B, random_state=3) - ref) < TOL


def test_linear_cka_equals_pypi_repsim_gretton():
    """PyPI repsim's linear CKA (Gretton's biased HSIC) is the same number; its "song"
    estimator is not Kornblith et al.'s debiased CKA (docs/measures.md), so it is not used."""
    import repsim

    A, B = _pair(13)
    assert abs(_m(A, B, "linear_cka") - repsim.cka([A, B], kernel_type="linear", estimator="gretton")[0, 1]) < TOL
