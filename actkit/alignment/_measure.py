"""``actkit.measure``: one measure of the protocol (:mod:`actkit.measures`) on two row
sources; an alignment error goes through :func:`~actkit.alignment.compare`."""

from __future__ import annotations

from actkit.alignment._compare import compare
from actkit.errors import ValidationError
from actkit.measures import evaluate, parse_measures

__all__ = ["measure"]


def measure(A, B, name, *, max_rows=10000, random_state=0, groups=None, device="cpu",
            progress=None, **params):
    """The measure ``name`` between two representations of the same rows (or several
    measures, from one pass where they share it).

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features_a)
        numpy array, torch tensor, ``h5py.Dataset`` or store layer (streamed).
    B : array-like of shape (n_rows, n_features_b)
    name : str or list of str
        One of :func:`actkit.measures.available` (docs/measures.md); or a list of them (or
        one string of several, ``"procrustes,mutual_knn:k=5"``), each with its parameters
        after a colon.
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
        ``shape_metric``); one measure only.

    Returns
    -------
    float, or dict of str to float
        With a list (or several names), ``{name: value}`` in the order asked.

    Examples
    --------
    >>> import numpy as np
    >>> import actkit
    >>> A = np.random.default_rng(0).normal(size=(500, 8))
    >>> round(actkit.measure(A, 2 * A @ np.linalg.qr(np.ones((8, 8)) + np.eye(8))[0], "procrustes"), 6)
    0.0
    >>> {k: round(v, 6) for k, v in actkit.measure(A, A[:, ::-1], ["linear_cka", "rsa"]).items()}
    {'linear_cka': 1.0, 'rsa': 1.0}
    """
    several = not isinstance(name, str) or "," in name
    if not isinstance(name, (str, list, tuple)):
        raise ValidationError(f"name must be a measure's name or a list of them, got {type(name).__name__}")
    if several and params:
        raise ValidationError("with several measures give each one's parameters in its name "
                              "(e.g. ['procrustes', 'mutual_knn:k=5']), not as keywords")
    chosen = parse_measures(name if several else [(name, params)])
    if groups is None:
        groups = getattr(A, "groups", None)
        if groups is None:
            groups = getattr(B, "groups", None)
    out = {}
    align = [m for m, _ in chosen if m.source == "alignment"]
    if align:
        methods = [x for x in ("permutation", "rigid", "linear", "ica") if any(
            x == m.name or (m.name == "ica_efficiency" and x != "linear") for m in align)]
        d = compare(A, B, groups=groups, random_state=random_state, methods=tuple(methods),
                    device=device, progress=progress).to_dict()
        out.update({m.name: float(m.compute(d)) for m in align})
    rest = [(m, p) for m, p in chosen if m.source != "alignment"]
    if rest:
        out.update(evaluate(A, B, rest, groups=groups, max_rows=max_rows, random_state=random_state,
                            device=device, progress=progress))
    values = {m.name: out[m.name] for m, _ in chosen}
    return values if several else values[chosen[0][0].name]
