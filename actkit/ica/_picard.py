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
    """Preconditioned L-BFGS on the orthogonal group (Picard-O). Returns (W, n_iter, gnorm)."""
    EG, M, Egp = data_pass(source, W, f)
    if counter:
        counter.tick()

    def signs_of(M, Egp):
        kappa = np.diag(M) - Egp
        s = -np.sign(kappa)
        s[s == 0] = 1.0
        return s

    def grad_hess(s, M, Egp):
        SM = s[:, None] * M
        G = SM - SM.T
        a = s * (Egp - np.diag(M))  # per-component curvature term (unit-variance sources)
        h = a[:, None] + a[None, :]
        return G, np.maximum(h, lambda_min)

    s = signs_of(M, Egp)
    loss = float(s @ EG)
    noise = 8.0 * float(np.finfo(source.np_dtype).eps)  # relative rounding noise of the loss
    G, h = grad_hess(s, M, Egp)
    mem = []
    gnorm = float(np.abs(G).max()) if G.size else 0.0
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        if gnorm < tol:
            n_iter -= 1
            break
        # L-BFGS two-loop recursion with the diagonal Hessian approximation as H0
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
        biggest = np.abs(D).max()
        if biggest > 1.0:  # never rotate by more than ~57 degrees in one plane
            D = D / biggest
        accepted = False
        for attempt in range(2):
            step = 1.0
            for _ in range(ls_tries):
                W_try = expm_skew(step * D) @ W
                EG_t, M_t, Egp_t = data_pass(source, W_try, f)
                if counter:
                    counter.tick(grad=f"{gnorm:.1e}")
                loss_t = float(s @ EG_t)
                if loss_t < loss + 1e-12 * abs(loss):
                    accepted = True
                    break
                # near convergence the decrease falls below the rounding noise of a loss
                # summed from float32 values: accept a step within that noise when it
                # lowers the gradient (otherwise the search stops short of ``tol``)
                if loss_t <= loss + noise * abs(loss) and \
                        float(np.abs(grad_hess(s, M_t, Egp_t)[0]).max()) < gnorm:
                    accepted = True
                    break
                step /= 2.0
            if accepted or attempt == 1:
                break
            mem.clear()  # line search failed along the L-BFGS direction: use the gradient
            D = -G / h
            biggest = np.abs(D).max()
            if biggest > 1.0:
                D = D / biggest
        if not accepted:
            break
        W = W_try
        s_new = signs_of(M_t, Egp_t)
        G_new, h = grad_hess(s_new, M_t, Egp_t)
        if np.any(s_new != s):
            mem.clear()
        else:
            sk = step * D
            yk = G_new - G
            sy = np.sum(sk * yk)
            if sy > 1e-12:
                mem.append((sk, yk, 1.0 / sy))
                if len(mem) > m:
                    mem.pop(0)
        s, G = s_new, G_new
        loss = float(s @ EG_t)
        gnorm = float(np.abs(G).max())
        if _trace.hook is not None:
            _trace.hook(W, n_iter, gnorm, step * np.abs(D).max(), source.n)
    return W, n_iter, gnorm
