"""Picard-O (Ablin, Cardoso & Gramfort 2018): preconditioned L-BFGS on the orthogonal group.

Solves the symmetric FastICA problem (its fixed points are symmetric FastICA's, the sign of
each component's contrast chosen from its stability coefficient as in extended Picard) in a
few tens of passes where the fixed-point iteration can stall for hundreds.
"""

from __future__ import annotations

import numpy as np

from actkit.ica import _trace
from actkit.ica._rotations import expm_skew
from actkit.ica._source import data_pass


def picard_o(source, W, f, *, tol, max_iter, m=7, lambda_min=0.01, ls_tries=10, counter=None):
    """Preconditioned L-BFGS on the orthogonal group (Picard-O).

    ``source``: the whitened rows (a :class:`~actkit.ica._source.WhitenedSource`); ``W``:
    the (k, k) starting rotation; ``f``: the contrast; ``m``: the L-BFGS memory;
    ``lambda_min``: the floor of the Hessian approximation; ``ls_tries``: halvings per line
    search; ``counter``: ticks once per data pass. Returns ``(W, n_iter, gnorm)``: the
    rotation, the iterations taken and the largest gradient entry at the end.
    """
    EG, M, Egp = data_pass(source, W, f)
    if counter:
        counter.tick()
    s = _signs(M, Egp)
    loss = float(s @ EG)
    noise = 8.0 * float(np.finfo(source.np_dtype).eps)  # relative rounding noise of the loss
    G, h = _grad_hess(s, M, Egp, lambda_min)
    mem = []
    gnorm = float(np.abs(G).max()) if G.size else 0.0
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        if gnorm < tol:
            n_iter -= 1
            break
        D = _lbfgs_direction(G, h, mem)
        found = _line_search(source, W, D, G, h, f, s, loss, gnorm, noise, mem, ls_tries, lambda_min, counter)
        if found is None:
            break
        W, step, D, EG_t, M_t, Egp_t = found
        s_new = _signs(M_t, Egp_t)
        G_new, h = _grad_hess(s_new, M_t, Egp_t, lambda_min)
        _remember(mem, s, s_new, step * D, G_new - G, m)
        s, G = s_new, G_new
        loss = float(s @ EG_t)
        gnorm = float(np.abs(G).max())
        if _trace.hook is not None:
            _trace.hook(W, n_iter, gnorm, step * np.abs(D).max(), source.n)
    return W, n_iter, gnorm


def _signs(M, Egp):
    """Each component's contrast sign (k,) from its stability coefficient
    ``diag(M) - E[g'(y)]`` (extended Picard): -sign, 1 where it is 0."""
    kappa = np.diag(M) - Egp
    s = -np.sign(kappa)
    s[s == 0] = 1.0
    return s


def _grad_hess(s, M, Egp, lambda_min):
    """The relative gradient ``G`` (k, k, skew-symmetric) on the orthogonal group for the
    signs ``s``, and the diagonal Hessian approximation ``h`` (k, k), floored at ``lambda_min``."""
    SM = s[:, None] * M
    G = SM - SM.T
    a = s * (Egp - np.diag(M))  # per-component curvature term (unit-variance sources)
    h = a[:, None] + a[None, :]
    return G, np.maximum(h, lambda_min)


def _capped(D):
    """``D`` scaled so that no entry exceeds 1: never rotate by more than ~57 degrees in one plane."""
    biggest = np.abs(D).max()
    return D / biggest if biggest > 1.0 else D


def _lbfgs_direction(G, h, mem):
    """The search direction (k, k): the L-BFGS two-loop recursion over ``mem`` (a list of
    ``(s_k, y_k, rho_k)``) with ``h`` as the initial Hessian; the preconditioned gradient
    ``-G / h`` (and ``mem`` cleared) where that is not a descent direction; capped."""
    q = G.copy()
    alphas = []
    for sk, yk, rho in reversed(mem):
        a_ = rho * np.sum(sk * q)
        q -= a_ * yk
        alphas.append(a_)
    r = q / h
    for (sk, yk, rho), a_ in zip(mem, reversed(alphas)):
        b_ = rho * np.sum(yk * r)
        r += sk * (a_ - b_)
    D = -r
    if np.sum(D * G) >= 0:  # not a descent direction: restart from the preconditioned gradient
        mem.clear()
        D = -G / h
    return _capped(D)


def _line_search(source, W, D, G, h, f, s, loss, gnorm, noise, mem, ls_tries, lambda_min, counter):
    """Backtracking along ``expm(step D) W`` (step 1, halved up to ``ls_tries`` times); where
    that fails, ``mem`` is cleared and the search repeated along the capped preconditioned
    gradient ``-G / h``. Returns ``(W_new, step, D, EG, M, Egp)`` (the accepted rotation, its
    step and direction, and its data pass), or None when no step is accepted."""
    for attempt in range(2):
        step = 1.0
        for _ in range(ls_tries):
            W_try = expm_skew(step * D) @ W
            EG_t, M_t, Egp_t = data_pass(source, W_try, f)
            if counter:
                counter.tick(grad=f"{gnorm:.1e}")
            loss_t = float(s @ EG_t)
            if loss_t < loss + 1e-12 * abs(loss):
                return W_try, step, D, EG_t, M_t, Egp_t
            # near convergence the decrease falls below the rounding noise of a loss
            # summed from float32 values: accept a step within that noise when it
            # lowers the gradient (otherwise the search stops short of ``tol``)
            if loss_t <= loss + noise * abs(loss) and \
                    float(np.abs(_grad_hess(s, M_t, Egp_t, lambda_min)[0]).max()) < gnorm:
                return W_try, step, D, EG_t, M_t, Egp_t
            step /= 2.0
        if attempt == 1:
            return None
        mem.clear()  # line search failed along the L-BFGS direction: use the gradient
        D = _capped(-G / h)
    return None


def _remember(mem, s, s_new, sk, yk, m):
    """Update the L-BFGS memory in place with the step ``sk`` and gradient change ``yk``
    (both (k, k)): cleared when a sign flipped (``s`` to ``s_new``), the pair skipped when
    its curvature ``<sk, yk>`` is not positive, the oldest pair dropped beyond ``m``."""
    if np.any(s_new != s):
        mem.clear()
        return
    sy = np.sum(sk * yk)
    if sy > 1e-12:
        mem.append((sk, yk, 1.0 / sy))
        if len(mem) > m:
            mem.pop(0)
