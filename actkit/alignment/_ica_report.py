"""The ICA measures of one :func:`~actkit.compare`: the maps to score on the held-out rows,
then the spread, the paper's single-fit estimator, the reproducibility check and their
notes (``docs/definitions.md``, "ICA alignment")."""

from __future__ import annotations

import math

import numpy as np

from actkit.alignment._ica_best import identifiable
from actkit.alignment._ica_map import ica_min_rows
from actkit.ica import GAUSSIAN_Z


def ica_maps(h):
    """The extra maps to score: ``{("ica", i): map}`` for ``restarts_`` and
    ``{("ica_classic", r): map}`` for the single-start maps not already among them; and the
    key of each single-start map."""
    maps, seen = {}, {}
    for i, m in enumerate(h.restarts_):
        maps[("ica", i)] = m
        seen[id(m)] = ("ica", i)
    classic_keys = []
    for r, m in enumerate(h.classic_):
        key = seen.get(id(m), ("ica_classic", r))
        maps[key] = m
        classic_keys.append(key)
    return maps, classic_keys


def fit_notes(h, n_rows, k_all):
    """The notes of the fit: fewer components than the width (the rows rule), too few rows
    for a forced ``k``. Returns a list of strings."""
    k = int(h.n_components_)
    notes = []
    if h.n_components_reason_ == "rows":
        notes.append(f"ICA fitted the leading {k} of {k_all} whitened components: {n_rows} fit rows "
                     f"support {k} by the rows rule max(50 k, k^2/4); the other directions are mapped as "
                     f"the permutation maps them (ica_n_components forces k)")
    elif n_rows < ica_min_rows(k):
        notes.append(f"ICA had {n_rows} fit rows for {k} components ({n_rows / max(k, 1):.0f} per "
                     f"component); FastICA needs about {ica_min_rows(k)} (max(50 k, k^2/4)) or it finds "
                     f"spurious sources, so the ica error is unreliable: give it more rows (ica_max_rows, "
                     f"more inputs) or fewer components (leave ica_n_components unset)")
    notes.extend(gaussian_notes(h))
    return notes


def gaussian_notes(h):
    """The note of each side whose whitened FastICA rows show no non-Gaussian signal beyond
    chance (``h.gaussian_``; docs/definitions.md, "ICA alignment", the Gaussian check)."""
    out = []
    for name, gaussian, stats in zip("AB", getattr(h, "gaussian_", (False, False)),
                                     getattr(h, "gaussianity_", (None, None))):
        if gaussian:
            out.append(
                f"FastICA found nothing to identify on {name}: its whitened fit rows show no "
                f"non-Gaussian signal beyond chance (z-scores by input sample: kurtosis "
                f"{stats['kurtosis']:.1f}, skewness {stats['skewness']:.1f}, cumulant "
                f"{stats['cumulant']:.1f}, all below {GAUSSIAN_Z:g}), so every rotation is an ICA "
                f"solution there; its {h.restarts} restarts keep their random starts (0 iterations) "
                f"and the ica column is not a measurement of shared sources")
    return out


def ica_measures(h, sums, classic_keys, n_eval, diam_b, errors, den, defined, b_rows, dtype):
    """The ICA keys of ``CompareResult.info`` and the notes.

    Parameters
    ----------
    h : fitted ICAAlignment
    sums : dict
        Summed held-out l2 errors of every scored map (``("ica", i)`` keys included).
    classic_keys : list
        The keys of the single-start maps in ``sums``.
    n_eval : int
    diam_b : float
    errors : dict of method -> error
    den : float
        permutation - rigid.
    defined : bool
        Whether the efficiency is defined (``den`` above its noise).
    b_rows : ndarray of shape (m, Db)
        Held-out rows of B (the diameter rows) for the self floor.
    dtype : numpy dtype of the errors' computation

    Returns
    -------
    (info dict, notes list)
    """
    runs = np.array([sums[("ica", i)] for i in range(len(h.restarts_))]) / n_eval / diam_b
    ica_std = float(runs.std(ddof=1)) if runs.size > 1 else float("nan")
    classic = np.array([sums[key] for key in classic_keys]) / n_eval / diam_b
    R = classic.size
    se = float(classic.std(ddof=1) / math.sqrt(R)) if R > 1 else float("nan")
    c_eff = c_eff_se = float("nan")
    if defined:
        ce = (errors["permutation"] - classic) / den
        c_eff = float(ce.mean())
        c_eff_se = float(ce.std(ddof=1) / math.sqrt(R)) if R > 1 else float("nan")
    floor = float("nan")
    if h.self_map_ is not None and b_rows.shape[0]:
        diff = np.asarray(h.self_map_.predict_rows(b_rows, dtype), dtype=np.float64) - b_rows
        floor = float(np.sqrt(np.einsum("ij,ij->i", diff, diff)).mean() / diam_b)
    k = int(h.n_components_)
    ok, why = identifiable(h.shared_halves_, k, floor, den if defined else float("nan"))
    notes = []
    if ok is False:
        notes.append(f"ica_identifiable is false: {why}; the ica column is then one of several "
                     f"optima, not a reproducible measurement (docs/definitions.md, ICA alignment)")
    sh = h.shared_halves_
    info = {
        "ica_method": h.ica_method, "ica_seed": int(h.random_state),
        "ica_n_components_reason": h.n_components_reason_,
        "ica_std": ica_std,
        "ica_efficiency_std": ica_std / den if defined else float("nan"),
        "ica_classic": float(classic.mean()), "ica_classic_se": se,
        "ica_classic_efficiency": c_eff, "ica_classic_efficiency_se": c_eff_se,
        "ica_best_restart_a": None if h.best_ is None else h.best_[0],
        "ica_best_restart_b": None if h.best_ is None else h.best_[1],
        "ica_shared_halves": None if sh is None else int(min(sh)),
        "ica_shared_halves_a": None if sh is None else int(sh[0]),
        "ica_shared_halves_b": None if sh is None else int(sh[1]),
        "ica_self_floor": floor,
        "ica_identifiable": ok,
    }
    return info, notes
