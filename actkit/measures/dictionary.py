"""The ``dictionary`` measure (issue 34): do the sparse dictionaries of A and B find the same
atoms? A ``SparseDictionary`` is fitted to each side's row sample; the share of A's atoms
with a match in B is reported. Formula: docs/measures.md, "Dictionary", and
docs/definitions.md, "Stability of a dictionary".

``match="codes"`` (default; any two representations of the same inputs): atoms of A and B
are matched one to one (Hungarian) on the ``|Pearson|`` correlation of their codes over the
sampled rows, and an atom of A has a match when its partner's codes correlate above
``threshold``. ``match="atoms"`` (the same feature space, e.g. two checkpoints of one model):
on the ``|cos|`` of the atoms themselves, as :func:`actkit.dictionary_stability` matches the
restarts of one fit.

The codes are those of greedy top-k coding, which depends on the atoms' coherence: a
rotation of the same sparse data matches every atom, while an ill-conditioned linear map of
it (condition number 70 in a check) left the atoms recoverable (92% at |cos| > 0.95) but
their top-k codes correlating above 0.9 for only 2.5% of them.
"""

from __future__ import annotations

import numpy as np

from actkit.dictionary import SparseDictionary
from actkit.errors import ValidationError
from actkit.measures._protocol import Measure, choice_param, float_param, int_param

__all__ = ["dictionary_from_rows", "MEASURES"]


def _fit(X, n_components, k, seed):
    return SparseDictionary(n_components or X.shape[1], k=k, random_state=seed).fit(X)


def dictionary_from_rows(A, B, n_components=None, k=None, match="codes", threshold=0.9, seed=0):
    """Share of A's atoms whose Hungarian partner in B's dictionary passes ``threshold``.

    Parameters
    ----------
    A : torch.Tensor of shape (n, p)
    B : torch.Tensor of shape (n, q)
        Rows of the same inputs.
    n_components : int, optional
        Atoms of each dictionary (default: each side's width, a complete dictionary).
    k : int, optional
        Active atoms per row (top-k codes; default ``max(1, width // 10)`` per side).
    match : {"codes", "atoms"}
    threshold : float
        |Pearson| of the codes (``codes``) or |cos| of the atoms (``atoms``) a match needs.
    seed : int
        ``random_state`` of both fits.

    Returns
    -------
    float in [0, 1]
    """
    from actkit.dictionary import match_atoms, match_codes  # late: the registry imports every measure module, most never need the dictionary estimators

    a = A.detach().cpu().numpy().astype(np.float32)
    b = B.detach().cpu().numpy().astype(np.float32)
    fa, fb = _fit(a, n_components, k, seed), _fit(b, n_components, k, seed)
    if match == "atoms":
        _, _, v = match_atoms(fa.dictionary_, fb.dictionary_)
    else:
        _, _, v = match_codes(fa.transform(a), fb.transform(b))
    return float(np.sum(v > threshold) / fa.dictionary_.shape[0])


def _check(params, widths, n_rows):
    p, q = widths
    if params["match"] == "atoms" and p != q:
        raise ValidationError(f"measure dictionary with match=atoms needs equal widths (one feature space), got "
                              f"{p} and {q}; use match=codes")
    for w in (p, q):
        n = params["n_components"] or w
        if params["k"] is not None and params["k"] > n:
            raise ValidationError(f"measure dictionary: k={params['k']} must be at most n_components={n}")
    if n_rows is not None and n_rows < 2:
        raise ValidationError(f"measure dictionary needs at least 2 rows, got {n_rows}")


MEASURES = (
    Measure("dictionary", "similarity",
            "codes: any invertible change of each side that keeps its dictionary's atoms (permutation, sign and "
            "scale of atoms); atoms: permutation and sign of the atoms", "rows", dictionary_from_rows,
            paper="Zhou & Klindt 2026, Complete or sparse: a tale of two identifiabilities (sparse dictionary "
                  "learning recovers sparse latents)",
            reference="actkit.SparseDictionary on each side + scipy linear_sum_assignment (Hungarian) on |corr| "
                      "of the codes or |cos| of the atoms",
            params=(int_param("n_components", None, 1, none=True), int_param("k", None, 1, none=True),
                    choice_param("match", "codes", ("codes", "atoms")),
                    float_param("threshold", 0.9, 0.0, 1.0, open_low=True, open_high=True),
                    int_param("seed", 0, 0)),
            check=_check,
            cost="two SparseDictionary fits on n sampled rows (O(n K d k) per epoch each) and one K x K Hungarian "
                 "match (O(K^3) worst case)"),
)
