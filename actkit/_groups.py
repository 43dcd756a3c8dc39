"""Rows as input samples: the one home of the rule every p-value, interval and chance level rests on.

The rows of a layer come from input samples (a text's tokens, an image's patches), and the
rows of one sample are not independent: the unit of every resampling in actkit is the input
sample, never the row (rsatoolbox resamples its patterns by descriptor the same way). This
module says, once, what that means; :class:`SampleGroups` carries it for one set of rows:

* **samples**: the sample of each row is given by an id (any sortable values, shape (n,)); the
  samples are numbered ``0 .. G-1`` in the order of their sorted ids (``np.unique``). No ids:
  every row is its own sample.
* **sample order**: the rows sorted by sample, a sample's rows in their own order (a stable
  sort), so that ``offsets[s]:offsets[s + 1]`` are sample ``s``'s rows and ``position`` is a
  row's place within its sample (token 0, 1, ...).
* **length classes**: the samples of each length (rows per sample). A permutation re-pairs a
  sample of A only with a sample of B of the same length, row by row (token ``i`` meets token
  ``i``); a sample alone in its length (not **movable**) keeps its partner.
* **the row order of a permutation** ``perm`` (sample ``s`` of A meets sample ``perm[s]`` of
  B): in sample order, row ``(s, p)`` of A meets row ``offsets[perm[s]] + p`` of B.
* **the draws**, each from its own seeded stream: ``N`` permutations
  (:func:`permutation_draws`, ``np.random.default_rng([random_state, 1])``), ``M`` bootstrap
  resamples of the samples with replacement (:func:`bootstrap_draws`, stream 2; the held-out
  errors' resamples stream 3), and one re-pairing for a chance level
  (:meth:`SampleGroups.one_permutation`, ``default_rng([random_state, window])``).
* **the fit/eval split**: a seeded share of the samples held out (:func:`heldout_samples`),
  the split of compare and of the units' token scores;
* **a clustered standard error** of the mean of per-row values, the rows clustered by sample
  (:meth:`SampleGroups.clustered_se`).
* **the same rows**: two sources (stores, store layers, arrays) hold the same input samples
  row for row, or one line says which of the inputs, the row counts or the row indexes differ
  (:func:`check_same_rows`: every comparison, layer map and matching asks it).

Ground floor: numpy only. Used by :mod:`actkit.inference` (the moments' and the row
measures' resampling), :mod:`actkit.measures` (the row sample and the pairwise structures),
:mod:`actkit.alignment` (the split, the chance levels, the errors' intervals),
:mod:`actkit.ica` (the Gaussian check by sample) and :mod:`actkit.units` (the matched units'
null).
"""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError

__all__ = ["SampleGroups", "permutation_draws", "bootstrap_draws", "clustered_se", "check_same_rows", "heldout_samples"]


class SampleGroups:
    """``n`` rows grouped by input sample.

    Parameters
    ----------
    ids : array-like of shape (n,) or None
        The input sample of each row (any sortable ids); None: every row its own sample.
    n : int, optional
        The number of rows: required without ``ids``; with ``ids``, checked against their shape
        (a one-line :class:`~actkit.errors.ValidationError` naming ``groups``).

    Attributes
    ----------
    n, G : int
        Rows and samples.
    inverse : ndarray of shape (n,)
        The sample (``0 .. G-1``) of each row, rows in their given order.
    order : ndarray of shape (n,)
        The rows in sample order (a stable sort of ``inverse``).
    sid : ndarray of shape (n,)
        The sample of each row in sample order (``inverse[order]``, ascending).
    n_s : ndarray of shape (G,)
        Rows of each sample (its length).
    offsets : ndarray of shape (G + 1,)
        Sample ``s``'s rows, in sample order, are ``offsets[s]:offsets[s + 1]``.
    position : ndarray of shape (n,)
        Each row's place within its sample, in sample order.
    """

    def __init__(self, ids=None, n=None):
        if ids is None:
            if n is None:
                raise ValueError("SampleGroups needs ids or n")
            inverse = np.arange(int(n))
        else:
            ids = np.asarray(ids)
            if n is not None and ids.shape != (n,):
                raise ValidationError(f"groups must have one entry per row ({n}), got shape {ids.shape}")
            inverse = np.unique(ids, return_inverse=True)[1].ravel()
        self.inverse = inverse
        self.n = int(inverse.size)
        self.order = np.argsort(inverse, kind="stable")
        self.sid = inverse[self.order]
        self.n_s = np.bincount(self.sid)
        self.G = int(self.n_s.size)
        self.offsets = np.concatenate([[0], np.cumsum(self.n_s)])
        self.position = np.arange(self.n) - self.offsets[self.sid]

    @classmethod
    def of(cls, groups, n):
        """``groups`` as :class:`SampleGroups` of ``n`` rows (already one: itself)."""
        return groups if isinstance(groups, cls) else cls(groups, n)

    # ------------------------------------------------------------------ lengths
    def classes(self):
        """``[(L, ids)]``: the samples of each length ``L`` (ascending), their ids ascending."""
        return [(int(L), np.flatnonzero(self.n_s == L)) for L in np.unique(self.n_s)]

    def movable(self):
        """Which samples a permutation can move (bool, shape (G,)): those in a length class of
        at least two."""
        return np.bincount(self.n_s)[self.n_s] >= 2

    def movable_share(self) -> float:
        """The share of samples a permutation can move."""
        return float(self.movable().sum() / self.G)

    def movable_row_share(self) -> float:
        """The share of rows whose sample a permutation can move."""
        return float(self.n_s[self.movable()].sum() / self.n)

    # ------------------------------------------------------------------ re-pairing
    def row_order(self, perm):
        """The row of B (in sample order) that meets each row of A (in sample order) when
        sample ``s`` of A meets sample ``perm[s]`` of B (``perm`` within length classes):
        shape (n,) for ``perm`` of shape (G,), (k, n) for permutations of shape (k, G)."""
        perm = np.asarray(perm)
        if perm.ndim == 2:
            return self.offsets[perm][:, self.sid] + self.position
        return self.offsets[perm][self.sid] + self.position

    def paired_rows(self, perm):
        """:meth:`row_order` in the rows' given order: ``r[i]``, the row of B that row ``i`` of
        A meets."""
        r = np.empty(self.n, np.int64)
        r[self.order] = self.order[self.row_order(perm)]
        return r

    def permutation_draws(self, N, random_state):
        """:func:`permutation_draws` of these samples."""
        return permutation_draws(self.n_s, N, random_state)

    def one_permutation(self, random_state, window=0):
        """One re-pairing of the samples (a chance level's): drawn by
        ``np.random.default_rng([random_state, window])``, one ``rng.permutation`` of each
        length class of at least two, lengths ascending."""
        rng = np.random.default_rng([int(random_state), int(window)])
        perm = np.arange(self.G)
        for _, idx in self.classes():
            if idx.size > 1:
                perm[idx] = idx[rng.permutation(idx.size)]
        return perm

    def bootstrap_draws(self, M, random_state, stream=2):
        """:func:`bootstrap_draws` of these samples."""
        return bootstrap_draws(self.G, M, random_state, stream)

    # ------------------------------------------------------------------ sums
    def totals(self, values):
        """Per-sample sums ``(G,)`` of per-row ``values`` (n,) in the rows' given order."""
        return np.bincount(self.inverse, weights=values, minlength=self.G)

    def per_sample(self, rows):
        """Per-sample sums of ``rows`` (n, ...) in sample order: shape (G, ...)."""
        return np.add.reduceat(rows, self.offsets[:-1], axis=0)

    def row_weights(self, m):
        """Each row's multiplicity (sample order) in a resample with sample multiplicities ``m`` (G,)."""
        return np.asarray(m, dtype=np.float64)[self.sid]

    def clustered_se(self, d):
        """Standard error of the mean of per-row values ``d`` (n,) in the rows' given order,
        the rows clustered by sample: ``sqrt(G / (G - 1) sum_g (t_g - mean(d) n_g)^2) / n``
        (``t_g`` the sample's sum); NaN with fewer than 2 rows or samples."""
        return clustered_se(d, self)


def clustered_se(d, groups=None):
    """:meth:`SampleGroups.clustered_se` of ``d`` (n,); ``groups``: ids, :class:`SampleGroups`
    or None (every row its own sample: the plain ``std(ddof=1) / sqrt(n)``)."""
    d = np.asarray(d)
    n = d.size
    if n < 2:
        return float("nan")
    if groups is None:
        return float(d.std(ddof=1) / np.sqrt(n))
    g = SampleGroups.of(groups, n)
    if g.G < 2:
        return float("nan")
    t = g.totals(d)
    return float(np.sqrt(g.G / (g.G - 1) * np.sum((t - d.mean() * g.n_s) ** 2)) / n)


def permutation_draws(n_s, N, random_state):
    """``N`` permutations of the samples, each only among samples of equal length.

    Parameters
    ----------
    n_s : ndarray of shape (G,)
        Rows of each sample.
    N : int
    random_state : int
        Drawn by ``np.random.default_rng([random_state, 1])``: for each length class of at
        least two (lengths ascending), one ``rng.permuted`` of all ``N`` rows at once.

    Returns
    -------
    perms : ndarray of shape (N, G)
        ``perms[j, s]``: the sample of B that sample ``s`` of A meets in permutation ``j``.
    movable : float
        The share of samples that can move (in a length class of at least two).
    """
    n_s = np.asarray(n_s)
    G = n_s.size
    perms = np.tile(np.arange(G), (N, 1))
    rng = np.random.default_rng([int(random_state), 1])
    movable = 0
    for length in np.unique(n_s):
        idx = np.flatnonzero(n_s == length)
        if idx.size < 2:
            continue
        movable += idx.size
        if N:
            perms[:, idx] = idx[rng.permuted(np.tile(np.arange(idx.size), (N, 1)), axis=1)]
    return perms, movable / G


def heldout_samples(G, eval_fraction, random_state) -> np.ndarray:
    """(G,) bool: the samples a fit/eval split holds out, ``round(eval_fraction * G)`` of them,
    the first of ``np.random.default_rng(random_state).permutation(G)`` (compare's split and
    the units' token scores; the caller checks that both sides keep a sample)."""
    order = np.random.default_rng(random_state).permutation(int(G))
    is_eval = np.zeros(int(G), bool)
    is_eval[order[:int(round(float(eval_fraction) * G))]] = True
    return is_eval


def bootstrap_draws(G, M, random_state, stream=2):
    """``(M, G)`` multiplicities (float64) of ``G`` samples in ``M`` resamples with replacement,
    drawn by ``np.random.default_rng([random_state, stream])`` (stream 2: the measures'; 3:
    the held-out errors')."""
    rng = np.random.default_rng([int(random_state), int(stream)])
    draws = rng.integers(0, G, size=(M, G))
    flat = (draws + (np.arange(M) * G)[:, None]).ravel()
    return np.bincount(flat, minlength=M * G).reshape(M, G).astype(np.float64)


# ---------------------------------------------------------------------------------------- the same rows
def check_same_rows(sources, labels, *, need="compare stores of the same inputs"):
    """Refuse sources that do not hold the same input samples, row for row (one line,
    :class:`~actkit.errors.ValidationError`), checked in this order:

    1. the inputs fingerprints of their stores (a store, or a store layer's ``store``), where
       two are recorded: ``"P and Q were extracted from different inputs (inputs fingerprints
       differ): <need>"``, ``P`` and ``Q`` the stores' paths (else the labels);
    2. their row counts (``shape[0]``, ``len``) where known;
    3. their row indexes (a store layer's ``index``: ``[sample, position]`` per row) where two
       are arrays.

    Parameters
    ----------
    sources : sequence
        Stores, store layers, arrays: anything of rows (each against the first).
    labels : sequence of str
        How each is named in a message (``"A"``, ``"a.h5:layer3"``).
    need : str
        What the caller needs, ending the fingerprints' line.
    """
    sources, labels = list(sources), [str(x) for x in labels]
    prints = [str(getattr(_store_of(s), "inputs_fingerprint", "") or "") for s in sources]
    for i in range(1, len(sources)):
        if prints[0] and prints[i] and prints[0] != prints[i]:
            a, b = (str(getattr(_store_of(s), "path", "") or lab) for s, lab in ((sources[0], labels[0]),
                                                                                (sources[i], labels[i])))
            raise ValidationError(f"{a} and {b} were extracted from different inputs (inputs fingerprints differ): {need}")
    rows = [_rows_of(s) for s in sources]
    for i in range(1, len(sources)):
        if rows[0] is not None and rows[i] is not None and rows[0] != rows[i]:
            raise ValidationError(f"{labels[0]} and {labels[i]} have different row counts ({rows[0]} and {rows[i]}); "
                                  f"they must be activations of the same inputs, row for row")
    index = [getattr(s, "index", None) for s in sources]
    for i in range(1, len(sources)):
        if isinstance(index[0], np.ndarray) and isinstance(index[i], np.ndarray) and \
                (index[0].shape != index[i].shape or not np.array_equal(index[0], index[i])):
            raise ValidationError(f"{labels[0]} and {labels[i]} have different row indexes ([sample, position] per "
                                  f"row): rows do not come from the same inputs and tokens")


def _store_of(source):
    """The store a source belongs to: itself where it records inputs, else its ``store``."""
    return source if hasattr(source, "inputs_fingerprint") else getattr(source, "store", None)


def _rows_of(source):
    shape = getattr(source, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    return None
