"""The cross scatters of many permutations at once, from the products of pairs of input samples.

A permutation ``pi`` pairs sample ``s`` of A with sample ``pi(s)`` of B (of the same length,
row by row): its cross product ``sum_s A_s^T B_pi(s)`` is one product of the rows, ``n Da Db``
multiply-adds. Every term is one of the pair products ``C_st = A_s^T B_t`` of two samples of
one length class (``G_c`` samples of ``L_c`` rows), so with more permutations than samples it
is cheaper to form all ``sum_c G_c^2`` of them once (``sum_c G_c^2 L_c Da Db`` multiply-adds,
dense GEMMs) and give each permutation the sum of its ``G`` pair products (``G Da Db``
additions). On the benchmark pair (200 samples of 100 rows, 384 wide, 1,000 permutations)
that is a fifth of the multiply-adds, and 24-29 ms of CPU a permutation against 72-85 ms
(one thread, measured at load 3 to 6; docs/compare.md, "The pair route").

Layout: for a chunk of :data:`ROWS` rows ``d`` of the cross product (A's features), one GEMM
per class and block of samples, ``(ROWS x S, L_c) @ (L_c, G_c Db)``, gives the rows ``(d, s,
t)`` of the pair products, each ``Db`` long; row ``d`` of a permutation's cross product is the
sum of the rows ``(d, s, pi(s))`` over ``s`` (torch's ``embedding_bag`` in sum mode, over runs
of :data:`RUN_BYTES` of the table, which stay in cache while every permutation reads them),
added run by run in a fixed order. The chunks run on the thread budget's workers, each at one
thread: the same sums at any thread count. Exact: the same sums as the rows' product in
another order (float32 for float32 sources, as that product).

The debiased CKA's pairing terms (``A^T dy[r]``, ``B[r]^T dx``, ``dx . dy[r]``) come the same
way from ``G_c^2`` pair vectors, in float64.

Memory: the cross products of a group of permutations (at most :data:`OUT_BYTES`; 590 MB for
1,000 at 384 x 384 in float32) and each worker's table (at most :data:`TABLE_BYTES`).
"""

from __future__ import annotations


import numpy as np

from actkit._threads import current_threads, map_ordered, small_linalg, torch_at_one_thread

#: rows of the cross product per task (a constant, never the thread count)
ROWS = 4

#: bytes of one task's table of pair products (rows (d, s, t), each Db long)
TABLE_BYTES = 1 << 26

#: bytes of the table that every permutation's gather reads while it stays in cache
RUN_BYTES = 1 << 23

#: permutations whose pairing terms are gathered at once
TERMS_BATCH = 32

#: bytes of the cross products of one group of permutations
OUT_BYTES = 1 << 30

#: multiply-adds that one gathered element of a pair product costs against a GEMM's (measured:
#: 0.26 ns against 0.028 ns on the 2-core AMD EPYC development machine)
GATHER_COST = 9.0

#: the pair route is taken where its predicted cost x PAIR_GAIN is at most the rows' product's
#: (it pays the pair products whatever the number of permutations; tests set 0 to force it)
PAIR_GAIN = 1.5


def group_size(samples):
    """Permutations per group: their cross products fit :data:`OUT_BYTES`."""
    return max(1, OUT_BYTES // (samples.da * samples.db * samples._pa.itemsize))


def pair_cost(samples, permutations):
    """Predicted multiply-adds of the pair route and of the rows' product, for
    ``permutations`` permutations."""
    if samples._device is not None or permutations == 0:
        return float("inf"), 0.0
    width = float(samples.da * samples.db)
    pairs = sum(len(ids) ** 2 * L for L, ids in samples.groups.classes()) * width
    groups = -(-permutations // group_size(samples))
    return groups * pairs + GATHER_COST * permutations * samples.G * width, permutations * samples.n * width


def use_pairs(samples, permutations) -> bool:
    """Whether the pair route is the cheaper one (not on a torch device)."""
    pairs, rows = pair_cost(samples, permutations)
    return pairs * PAIR_GAIN <= rows


class PairTables:
    """What every task of one group of permutations shares: each class's rows of A by
    feature ``(G_c, L_c, Da)``, B as ``(L_c, G_c Db)`` (row ``l`` of every sample side by side),
    the gathers' indices, and the pairing terms' vectors."""

    def __init__(self, samples, perms):
        self.s = samples
        self.perms = np.asarray(perms)
        dt = samples._pa.dtype
        o = samples.offsets
        self.classes = []
        pos = np.empty(samples.G, dtype=np.int64)          # a sample's place in its class
        for L, ids in samples.groups.classes():
            pos[ids] = np.arange(ids.size)
            rows = (o[ids][:, None] + np.arange(L)).ravel()
            a = np.ascontiguousarray(samples._pa[rows].reshape(ids.size, L, samples.da).transpose(2, 0, 1))
            b = np.ascontiguousarray(samples._pb[rows].reshape(ids.size, L, samples.db).transpose(1, 0, 2))
            self.classes.append((L, ids, a.astype(dt, copy=False), b.reshape(L, ids.size * samples.db)))
        self.pos = pos

    def runs(self, Gc, block):
        """Sample runs ``[(r0, r1)]`` of a block of ``block`` samples whose pair rows fit
        :data:`RUN_BYTES` (at least one sample)."""
        size = max(1, RUN_BYTES // max(1, Gc * self.s.db * self.s._pa.itemsize))
        return [(r, min(block, r + size)) for r in range(0, block, size)]

    def block(self, Gc, rows):
        """Samples of a class per GEMM: ``rows x block x Gc x Db`` fits :data:`TABLE_BYTES`."""
        per = rows * Gc * self.s.db * self.s._pa.itemsize
        return int(max(1, min(Gc, TABLE_BYTES // max(1, per))))


def _task(tables, span):
    """Rows ``span`` of every permutation's cross product: ``(k, d1 - d0, Db)``."""
    import torch  # torch: ~1.2 s at import (measured); only for the pair route's gathers

    s, perms = tables.s, tables.perms
    d0, d1 = span
    rows = d1 - d0
    out = np.zeros((len(perms), rows, s.db), dtype=s._pa.dtype)
    for L, ids, a, b in tables.classes:
        Gc = ids.size
        partner = tables.pos[perms[:, ids]]               # (k, Gc): the partner's place in the class
        step = tables.block(Gc, rows)
        for s0 in range(0, Gc, step):
            s1 = min(Gc, s0 + step)
            x = np.matmul(a[d0:d1, s0:s1].reshape(rows * (s1 - s0), L), b)      # rows (d, s, t), Db long
            x = torch.from_numpy(x.reshape(rows, (s1 - s0) * Gc, s.db))
            for r0, r1 in tables.runs(Gc, s1 - s0):
                idx = (np.arange(r1 - r0) * Gc)[None, :] + partner[:, s0 + r0:s0 + r1]
                idx = torch.from_numpy(np.ascontiguousarray(idx).ravel())
                offsets = torch.arange(0, idx.numel(), r1 - r0)
                for d in range(rows):
                    part = torch.nn.functional.embedding_bag(idx, x[d, r0 * Gc:r1 * Gc], offsets, mode="sum")
                    out[:, d] += part.numpy()
    return out


def permuted_crosses(samples, perms):
    """``A^T B[r]`` (k, Da, Db) in the product dtype for the permutations ``perms`` (k, G),
    from the pair products (module docstring)."""
    tables = PairTables(samples, perms)
    spans = [(d, min(samples.da, d + ROWS)) for d in range(0, samples.da, ROWS)]
    out = np.empty((len(perms), samples.da, samples.db), dtype=samples._pa.dtype)
    with small_linalg(), torch_at_one_thread():
        for (d0, d1), part in zip(spans, map_ordered(lambda sp: _task(tables, sp), spans, current_threads())):
            out[:, d0:d1] = part
    return out


def pairing_terms(samples, perms):
    """The debiased CKA's pairing terms of each permutation: ``x_dy = A^T dy[r]`` (k, Da),
    ``y_dx = B[r]^T dx`` (k, Db) and ``dx . dy[r]`` (k,), float64, from the pair vectors
    ``A_s^T dy_t``, ``B_t^T dx_s`` and ``dx_s . dy_t`` of each class."""
    perms = np.asarray(perms)
    k = len(perms)
    x_dy, y_dx, dxdy = np.zeros((k, samples.da)), np.zeros((k, samples.db)), np.zeros(k)
    o = samples.offsets
    for L, ids in samples.groups.classes():
        rows = (o[ids][:, None] + np.arange(L)).ravel()
        a = samples.A[rows].reshape(ids.size, L, samples.da)
        b = samples.B[rows].reshape(ids.size, L, samples.db)
        dx, dy = samples.dx[rows].reshape(ids.size, L), samples.dy[rows].reshape(ids.size, L)
        with small_linalg():
            ady = np.matmul(a.transpose(0, 2, 1), dy.T)     # (s, Da, t): A_s^T dy_t
            bdx = np.matmul(b.transpose(0, 2, 1), dx.T)     # (t, Db, s): B_t^T dx_s
            dd = dx @ dy.T                                  # (s, t)
        pos = np.empty(samples.G, dtype=np.int64)
        pos[ids] = np.arange(ids.size)
        here = np.arange(ids.size)

        def gather(j0, ids=ids, pos=pos, here=here, ady=ady, bdx=bdx, dd=dd):
            t = pos[perms[j0:j0 + TERMS_BATCH][:, ids]]      # (batch, Gc): each sample's partner
            x_dy[j0:j0 + TERMS_BATCH] += ady[here, :, t].sum(axis=1)
            y_dx[j0:j0 + TERMS_BATCH] += bdx[t, :, here].sum(axis=1)
            dxdy[j0:j0 + TERMS_BATCH] += dd[here, t].sum(axis=1)

        for _ in map_ordered(gather, range(0, k, TERMS_BATCH), current_threads()):
            pass        # each batch of permutations its own rows of the sums: any split, the same bits
    return x_dy, y_dx, dxdy


def group_products(samples, perms):
    """``products(j)``: the ``(A^T B[r], x_dy, y_dx, dx . dy[r])`` of permutation ``perms[j]``
    (:meth:`~actkit.inference.Samples.permuted_moments`'s ``products``)."""
    crosses = permuted_crosses(samples, perms)
    if not samples.norms:
        return lambda j: (crosses[j], None, None, None)
    x_dy, y_dx, dxdy = pairing_terms(samples, perms)
    return lambda j: (crosses[j], x_dy[j], y_dx[j], float(dxdy[j]))
