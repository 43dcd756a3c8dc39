"""The sparse codes and the epoch accumulator on torch devices (GPUs)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from actkit.dictionary._coding import fista


def topk_code_torch(X, D, G, k, positive):
    """:func:`~actkit.dictionary._coding.topk_code` on torch tensors (same algorithm, same tie rules up to float)."""
    import torch  # torch: ~1.2 s at import (measured); the estimator imports this module for CPU work too

    C = X @ D.T
    n = X.shape[0]
    support = torch.empty((n, k), dtype=torch.long, device=X.device)
    c = C
    coef = None
    for j in range(k):
        score = c.clone() if positive else c.abs()
        if j:
            score.scatter_(1, support[:, :j], float("-inf"))
        support[:, j] = score.argmax(dim=1)
        S = support[:, : j + 1]
        b = torch.gather(C, 1, S).double()
        if j == 0:
            coef = b / G[S[:, 0], S[:, 0]].double()[:, None]
        else:
            Gs = G[S[:, :, None], S[:, None, :]].double()
            Gs = Gs + 1e-6 * torch.eye(j + 1, dtype=Gs.dtype, device=Gs.device)
            coef = torch.linalg.solve(Gs, b.unsqueeze(-1)).squeeze(-1)
        if positive:
            coef = coef.clamp(min=0)
        if j + 1 < k:
            R = X - torch.einsum("nj,njd->nd", coef.to(X.dtype), D[S])
            c = R @ D.T
    return support, coef.to(X.dtype)


def l1_code_torch(X, D, G, alpha, positive, n_iter=100):
    """:func:`~actkit.dictionary._coding.l1_code` (FISTA) on torch tensors. Returns a dense (n, n_components) tensor."""
    import torch  # torch: ~1.2 s at import (measured); the estimator imports this module for CPU work too

    L = float(torch.linalg.eigvalsh(G.double())[-1]) or 1.0
    C = X @ D.T
    return fista(C, G, L, alpha, positive, n_iter, torch.zeros_like(C), relu=lambda v: v.clamp(min=0),
                 sign=torch.sign)


def code_dense_torch(X, D, G, p):
    """Dense codes (n, n_components) of a torch block."""
    import torch  # torch: ~1.2 s at import (measured); the estimator imports this module for CPU work too

    if p["code"] == "topk":
        support, coef = topk_code_torch(X, D, G, p["k"], p["positive"])
        return torch.zeros((X.shape[0], D.shape[0]), dtype=X.dtype, device=X.device).scatter_(1, support, coef)
    return l1_code_torch(X, D, G, p["alpha"], p["positive"])


class TorchEpoch:
    """:class:`_Epoch` on a torch device: the sums stay on the device (float64) until the end."""

    def __init__(self, D):
        import torch  # torch: ~1.2 s at import (measured); the estimator imports this module for CPU work too

        K, d = D.shape
        self.D = D
        self.AtA = torch.zeros((K, K), dtype=torch.float64, device=D.device)
        self.AtX = torch.zeros((K, d), dtype=torch.float64, device=D.device)
        self.sq_res = torch.zeros((), dtype=torch.float64, device=D.device)
        self.sq_x = torch.zeros((), dtype=torch.float64, device=D.device)
        self.n = 0
        self.nnz = torch.zeros((), dtype=torch.int64, device=D.device)
        self.worst = None

    def add(self, X, A, keep_worst):
        import torch  # torch: ~1.2 s at import (measured); the estimator imports this module for CPU work too

        R = X - A @ self.D
        rn = (R * R).sum(dim=1)
        self.AtA += (A.T @ A).double()
        self.AtX += (A.T @ X).double()
        self.sq_res += rn.double().sum()
        self.sq_x += (X.double() * X.double()).sum()
        self.n += X.shape[0]
        self.nnz += torch.count_nonzero(A)
        if keep_worst:  # as _Epoch.add
            m = min(keep_worst, rn.shape[0])
            idx = torch.topk(rn, m).indices
            cand = (rn[idx], R[idx], idx + (self.n - X.shape[0]))
            if self.worst is not None:
                cand = tuple(torch.cat([a, b]) for a, b in zip(self.worst, cand))
            if cand[0].shape[0] > keep_worst:
                top = torch.topk(cand[0], keep_worst).indices
                cand = tuple(c[top] for c in cand)
            order = torch.argsort(-cand[0], stable=True)
            self.worst = tuple(c[order] for c in cand)

    def to_numpy(self):
        """The accumulated sums as numpy values, with the attributes of an
        :class:`~actkit.dictionary._epoch.Epoch` (what the dictionary step reads)."""
        out = SimpleNamespace()
        out.D = self.D.cpu().numpy()
        out.AtA = self.AtA.cpu().numpy()
        out.AtX = self.AtX.cpu().numpy()
        out.sq_res = float(self.sq_res)
        out.sq_x = float(self.sq_x)
        out.n = self.n
        out.nnz = int(self.nnz)
        out.worst = None if self.worst is None else tuple(c.cpu().numpy() for c in self.worst)
        return out


def epoch_torch(blocks, D, p, keep_worst, device):
    import torch  # torch: ~1.2 s at import (measured); the estimator imports this module for CPU work too

    Dt = torch.from_numpy(np.ascontiguousarray(D)).to(device)
    G = Dt @ Dt.T
    ep = TorchEpoch(Dt)
    for X in blocks:
        Xt = torch.as_tensor(np.ascontiguousarray(X, dtype=D.dtype)).to(device)
        ep.add(Xt, code_dense_torch(Xt, Dt, G, p), keep_worst)
    return ep.to_numpy()


