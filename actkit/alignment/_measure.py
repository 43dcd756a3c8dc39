"""``actkit.measure``: one measure of the protocol (:mod:`actkit.measures`) on two row
sources; an alignment error goes through :func:`~actkit.alignment.compare`."""

from __future__ import annotations

from actkit.alignment._compare import compare
from actkit.measures import evaluate, parse_measures

__all__ = ["measure"]


def measure(A, B, name, *, max_rows=10000, random_state=0, groups=None, device="cpu",
            progress=None, **params) -> float:
    """The measure ``name`` between two representations of the same rows.

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features_a)
        numpy array, torch tensor, ``h5py.Dataset`` or store layer (streamed).
    B : array-like of shape (n_rows, n_features_b)
    name : str
        One of :func:`actkit.measures.available` (docs/measures.md).
    max_rows : int, default=10000
        A row-based measure uses a seeded sample of whole input samples of at most this many
        rows; a moment-based one uses every row, out of core.
    random_state : int, default=0
        Seed of the row sample (and of the fit/test split of ``linear_r2``).
    groups : array-like of shape (n_rows,), optional
        Input-sample id of each row (default: a store layer's ``groups``; else one row
        each).
    device : str, default="cpu"
        Torch device of a row-based measure.
    **params
        The measure's parameters (e.g. ``k=5`` for ``mutual_knn``, ``alpha=0.5`` for
        ``shape_metric``).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> import actkit
    >>> A = np.random.default_rng(0).normal(size=(500, 8))
    >>> round(actkit.measure(A, 2 * A @ np.linalg.qr(np.ones((8, 8)) + np.eye(8))[0], "procrustes"), 6)
    0.0
    """
    ((m, checked),) = parse_measures([(name, params)])
    if groups is None:
        groups = getattr(A, "groups", None)
        if groups is None:
            groups = getattr(B, "groups", None)
    if m.source == "alignment":
        methods = ("permutation", "rigid", "ica") if name == "ica_efficiency" else (name,)
        res = compare(A, B, groups=groups, random_state=random_state, methods=methods,
                      device=device, progress=progress)
        return m.compute(res.to_dict())
    out = evaluate(A, B, [(m, checked)], groups=groups, max_rows=max_rows,
                   random_state=random_state, device=device, progress=progress)
    return out[m.name]
