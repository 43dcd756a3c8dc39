"""Is a dictionary identifiable? :func:`dictionary_stability` of several fits (restarts).

``docs/definitions.md``, "Stability of a dictionary". Sparse dictionary learning is
identifiable (Zhou & Klindt 2026: sparse latents, a measurement matrix that meets the spark
condition) only up to the order and sign of the atoms, so two fits are compared through the
one-to-one match of their atoms that maximises the summed ``|cos|`` (the Hungarian
algorithm, :func:`actkit.metrics.match_columns`). Over ``R`` fits this follows the ICA
column (:mod:`actkit.alignment._ica_best`): the best fit (lowest reconstruction error), the
Icasso-style stability index of each atom, a split-halves check (the best fit of each half
of the restarts), a self floor (the agreement of a fit with a random rotation of itself:
chance), and ``identifiable`` with a one-line reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from actkit._matching import match_columns
from actkit._threads import current_threads, map_ordered
from actkit.errors import ValidationError

__all__ = ["dictionary_stability", "DictionaryStability", "match_atoms", "match_codes", "MATCH_COS", "HALVES_AGREE",
           "FLOOR_MARGIN"]

#: An atom is matched in another fit when its Hungarian partner has ``|cos|`` above this.
MATCH_COS = 0.9
#: The halves agree when their best fits match at least this share of the atoms.
HALVES_AGREE = 0.9
#: The fits must agree at least this far from the self floor towards 1 (mean matched |cos|).
FLOOR_MARGIN = 0.5


def _atoms(d, i):
    """Unit-norm float64 atoms (rows) of a fitted estimator or an atom matrix."""
    D = getattr(d, "dictionary_", None)
    if D is None:
        D = getattr(d, "components_", None)
    if D is None:
        if hasattr(d, "fit") and not hasattr(d, "shape"):
            raise ValidationError(f"dicts[{i}] ({type(d).__name__}) is not fitted: it has no dictionary_ or "
                                  "components_")
        D = d
    try:
        D = np.asarray(D, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"dicts[{i}] is neither a fitted dictionary nor an atom matrix: {e}") from None
    if D.ndim != 2 or D.shape[0] < 1 or D.shape[1] < 1:
        raise ValidationError(f"dicts[{i}] must be an atom matrix of shape (n_atoms, n_features), got shape "
                              f"{D.shape}")
    if not np.all(np.isfinite(D)):
        raise ValidationError(f"dicts[{i}] has NaN or infinite entries")
    norms = np.linalg.norm(D, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValidationError(f"dicts[{i}] has {int((norms == 0).sum())} all-zero atoms; atoms need a direction")
    return D / norms


def match_atoms(D1, D2):
    """One-to-one match of two sets of unit atoms on ``|cos|`` (Hungarian).

    Parameters
    ----------
    D1 : ndarray of shape (K1, d)
    D2 : ndarray of shape (K2, d)
        Unit-norm rows.

    Returns
    -------
    rows, cols : ndarray of shape (min(K1, K2),)
        Matched atom indices (``rows`` sorted).
    cos : ndarray of shape (min(K1, K2),)
        ``|cos|`` of each matched pair.
    """
    # float32 products for large pairs (4096^2 atoms: 3x faster; |cos| to ~1e-7, far below
    # any threshold); the assignment itself runs in float64 either way
    dt = np.float64 if D1.shape[0] * D2.shape[0] <= 1 << 20 else np.float32
    C = np.abs(D1.astype(dt, copy=False) @ D2.T.astype(dt, copy=False))
    r, c, _ = match_columns(C)
    return r, c, C[r, c]


def match_codes(A1, A2):
    """One-to-one match of two code matrices' columns on ``|Pearson|`` correlation (Hungarian;
    a constant column correlates with nothing).

    Parameters
    ----------
    A1 : ndarray of shape (n, K1)
    A2 : ndarray of shape (n, K2)
        Codes of the same ``n`` rows (inputs).

    Returns
    -------
    rows, cols : ndarray of shape (min(K1, K2),)
    corr : ndarray of shape (min(K1, K2),)
        ``|Pearson|`` of each matched pair.
    """
    Z = []
    for M in (A1, A2):
        M = np.asarray(M, dtype=np.float64)
        M = M - M.mean(axis=0)
        nrm = np.linalg.norm(M, axis=0)
        Z.append(M / np.where(nrm > 0, nrm, np.inf))
    C = np.abs(Z[0].T @ Z[1])
    r, c, _ = match_columns(C)
    return r, c, C[r, c]


def _code_corr(A1, A2):
    """``|Pearson|`` correlation of matched code columns (columns of equal index); a column
    constant on the rows (an atom never used there) correlates with nothing (0)."""
    A1 = A1 - A1.mean(axis=0)
    A2 = A2 - A2.mean(axis=0)
    n1, n2 = np.linalg.norm(A1, axis=0), np.linalg.norm(A2, axis=0)
    den = n1 * n2
    num = np.abs(np.einsum("ij,ij->j", A1, A2))
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _haar(r, rng):
    """A Haar-random (r, r) orthogonal matrix."""
    q, t = np.linalg.qr(rng.normal(size=(r, r)))
    return q * np.sign(np.diag(t))


def self_floor(D, rng, cos=MATCH_COS):
    """The best fit against a random rotation of itself within the atoms' span: the mean
    matched ``|cos|`` and share matched above ``cos`` that two unrelated fits of the same
    geometry (same atom Gram matrix) reach by chance."""
    w, v = np.linalg.eigh(D.T @ D)  # the atoms' span: eigenvectors of their (d, d) scatter
    keep = w > w[-1] * 1e-12
    V = v[:, keep].T
    r = V.shape[0]
    Dr = (D @ V.T) @ _haar(r, rng) @ V
    _, _, c = match_atoms(D, Dr)
    return float(c.mean()), float(np.mean(c > cos))


@dataclass
class DictionaryStability:
    """What :func:`dictionary_stability` reports (``docs/definitions.md``).

    Attributes
    ----------
    n_atoms : list of int
        Atoms of each fit (``R`` entries).
    mean_cos, share_matched : ndarray of shape (R, R)
        Per pair of fits: mean matched ``|cos|``; share of matched pairs with ``|cos| >
        MATCH_COS`` (over the ``min(K_r, K_s)`` pairs). Diagonal 1.
    mcc : ndarray of shape (R, R) or None
        Mean ``|Pearson|`` correlation of the matched atoms' codes on the rows ``X``
        (None without ``X``).
    best : int
        The fit of lowest ``reconstruction_error_`` (the first on ties; the first fit when
        the fits carry no error), ``best_by`` says which rule chose it.
    stability_index : ndarray of shape (K_best,)
        For each atom of the best fit: the share of the other ``R - 1`` fits in which its
        Hungarian partner has ``|cos| > MATCH_COS``. ``stability_indices`` has it for every fit.
    halves : tuple of two lists
        The restarts ``[0, ceil(R/2))`` and the rest; ``halves_best`` each half's best fit,
        ``shared_halves`` the atoms those two match above ``MATCH_COS``.
    self_floor, self_floor_share : float
        Mean matched ``|cos|`` (and share above ``MATCH_COS``) of the best fit against a
        Haar-random rotation of itself within its span: chance agreement.
    identifiable : bool or None
        None with one fit; ``reason`` says why, in one line.
    """

    n_atoms: list
    mean_cos: np.ndarray
    share_matched: np.ndarray
    mcc: np.ndarray | None
    best: int
    best_by: str
    stability_index: np.ndarray
    stability_indices: list = field(repr=False)
    halves: tuple = ((), ())
    halves_best: tuple | None = None
    shared_halves: int | None = None
    self_floor: float = float("nan")
    self_floor_share: float = float("nan")
    identifiable: bool | None = None
    reason: str = ""

    @property
    def n_fits(self):
        return len(self.n_atoms)

    def _pairs(self, M):
        R = self.n_fits
        return [float(M[r, s]) for r in range(R) for s in range(r + 1, R)]

    def to_dict(self):
        """JSON-ready summary: pair means, the per-pair values, the best fit's stability
        index per atom, the checks and the verdict."""
        R = self.n_fits
        pairs = [{"fits": [r, s], "mean_cos": float(self.mean_cos[r, s]),
                  "share_matched": float(self.share_matched[r, s]),
                  "mcc": None if self.mcc is None else float(self.mcc[r, s])}
                 for r in range(R) for s in range(r + 1, R)]

        def mean(M):
            v = self._pairs(M)
            return float(np.mean(v)) if v else None

        si = self.stability_index
        return {
            "n_fits": R, "n_atoms": [int(k) for k in self.n_atoms], "match_cos": MATCH_COS,
            "mean_cos": mean(self.mean_cos), "share_matched": mean(self.share_matched),
            "mcc": None if self.mcc is None else mean(self.mcc),
            "pairs": pairs, "best": int(self.best), "best_by": self.best_by,
            "stability_index_mean": float(si.mean()) if R > 1 else None,
            "stable_atoms": float(np.mean(si >= 1.0)) if R > 1 else None,
            "stability_index": [float(v) for v in si] if R > 1 else None,
            "halves": [list(self.halves[0]), list(self.halves[1])],
            "halves_best": None if self.halves_best is None else list(self.halves_best),
            "shared_halves": self.shared_halves,
            "self_floor": self.self_floor, "self_floor_share": self.self_floor_share,
            "identifiable": self.identifiable, "reason": self.reason,
        }

    def summary(self):
        """A few lines for a terminal."""
        d = self.to_dict()
        lines = [f"dictionary stability over {d['n_fits']} fits ({', '.join(map(str, d['n_atoms']))} atoms); "
                 f"best fit: {d['best']} ({d['best_by']})"]
        if d["n_fits"] > 1:
            mcc = "" if d["mcc"] is None else f", codes' MCC {d['mcc']:.3f}"
            lines.append(f"  pairs of fits: mean matched |cos| {d['mean_cos']:.3f}, share matched > {MATCH_COS:g} "
                         f"{d['share_matched']:.3f}{mcc}")
            lines.append(f"  stability index of the atoms of the best fit: mean {d['stability_index_mean']:.3f}, "
                         f"{d['stable_atoms']:.1%} found by every other fit")
            lines.append(f"  halves {d['halves_best']}: {d['shared_halves']} atoms shared; self floor "
                         f"{d['self_floor']:.3f} (share {d['self_floor_share']:.3f})")
        verdict = {True: "identifiable", False: "not identifiable", None: "identifiable: n/a"}[d["identifiable"]]
        lines.append(f"  {verdict}: {d['reason']}")
        return "\n".join(lines)


def _best(dicts, R):
    errs = [getattr(d, "reconstruction_error_", None) for d in dicts]
    if all(e is not None and np.isfinite(e) for e in errs):
        return [float(e) for e in errs], "lowest reconstruction_error_"
    return None, "first fit (atom matrices carry no reconstruction error)"


def _best_of(errs, idx):
    return min(idx) if errs is None else min(idx, key=lambda r: (errs[r], r))


def _codes(d, X, i):
    if not hasattr(d, "transform"):
        raise ValidationError(f"X needs fitted estimators (their transform gives the codes); dicts[{i}] is an "
                              "atom matrix")
    return np.asarray(d.transform(X), dtype=np.float64)


def dictionary_stability(dicts, X=None, *, random_state=0):
    """Do several dictionary fits (restarts, seeds) find the same atoms?

    Parameters
    ----------
    dicts : sequence of fitted SparseDictionary (or any estimator with ``dictionary_`` /
        ``components_``) or ndarray of shape (K_r, n_features)
        ``R`` fits of the same data; atoms are rows (normalised here).
    X : array-like of shape (n_samples, n_features), optional
        Rows the fits did **not** train on; with it, ``mcc`` is the mean ``|Pearson|``
        correlation of the codes (``transform``) of Hungarian-matched atoms. Needs
        estimators.
    random_state : int, default=0
        Seed of the random rotation of the self floor.

    Returns
    -------
    DictionaryStability
        ``to_dict()`` for JSON, ``summary()`` for a terminal.

    Raises
    ------
    ValidationError
        An empty list, an unfitted estimator, fits of different widths, or ``X`` with atom
        matrices or of the wrong width.
    """
    dicts = list(dicts) if not isinstance(dicts, np.ndarray) or dicts.ndim != 2 else [dicts]
    if not dicts:
        raise ValidationError("dictionary_stability needs at least one fit")
    Ds = [_atoms(d, i) for i, d in enumerate(dicts)]
    widths = {D.shape[1] for D in Ds}
    if len(widths) > 1:
        raise ValidationError(f"the fits have different numbers of features ({sorted(widths)}); compare fits of "
                              "the same rows")
    R = len(Ds)
    codes = None
    if X is not None:
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != Ds[0].shape[1] or X.shape[0] < 2:
            raise ValidationError(f"X must have shape (n >= 2, {Ds[0].shape[1]}), got {X.shape}")
        codes = [_codes(d, X, i) for i, d in enumerate(dicts)]
    pairs = [(r, s) for r in range(R) for s in range(r + 1, R)]
    matches = dict(zip(pairs, map_ordered(lambda p: match_atoms(Ds[p[0]], Ds[p[1]]), pairs,
                                          min(len(pairs), current_threads()))))
    mean_cos, share = np.eye(R), np.eye(R)
    mcc = np.eye(R) if codes is not None else None
    # found[r][s]: for each atom of fit r, whether its partner in fit s has |cos| > MATCH_COS
    found = [np.zeros((len(D), R), bool) for D in Ds]
    for (r, s), (rows, cols, c) in matches.items():
        mean_cos[r, s] = mean_cos[s, r] = c.mean()
        share[r, s] = share[s, r] = np.mean(c > MATCH_COS)
        found[r][rows, s] = c > MATCH_COS
        found[s][cols, r] = c > MATCH_COS
        if codes is not None:
            mcc[r, s] = mcc[s, r] = _code_corr(codes[r][:, rows], codes[s][:, cols]).mean()
    indices = [f.sum(axis=1) / max(R - 1, 1) for f in found]
    errs, best_by = _best(dicts, R)
    best = _best_of(errs, range(R))
    h = (R + 1) // 2
    halves = (list(range(h)), list(range(h, R)))
    rng = np.random.default_rng(random_state)
    floor, floor_share = self_floor(Ds[best], rng)
    out = DictionaryStability(n_atoms=[len(D) for D in Ds], mean_cos=mean_cos, share_matched=share, mcc=mcc,
                              best=best, best_by=best_by, stability_index=indices[best], stability_indices=indices,
                              halves=halves, self_floor=floor, self_floor_share=floor_share)
    if R < 2:
        out.reason = "one fit: restarts are needed to tell (R >= 2)"
        return out
    i, j = _best_of(errs, halves[0]), _best_of(errs, halves[1])
    out.halves_best = (i, j)
    key = (min(i, j), max(i, j))
    out.shared_halves = int(np.sum(matches[key][2] > MATCH_COS))
    out.identifiable, out.reason = verdict(out.shared_halves, min(len(Ds[i]), len(Ds[j])),
                                           float(np.mean(out._pairs(mean_cos))), floor)
    return out


def verdict(shared, k, mean_cos, floor):
    """``(identifiable, one-line reason)`` from the halves' shared atoms (of ``k``), the mean
    matched ``|cos|`` over pairs of fits and the self floor."""
    need = math.ceil(HALVES_AGREE * k)
    if shared < need:
        return False, (f"the best fits of the two halves share {shared} of {k} atoms at |cos| > {MATCH_COS:g} "
                       f"(fewer than {need})")
    bar = floor + FLOOR_MARGIN * (1.0 - floor)
    if mean_cos <= bar:
        return False, (f"fits agree at mean matched |cos| {mean_cos:.3f}, not above {bar:.3f} (halfway from the "
                       f"self floor {floor:.3f} to 1)")
    return True, (f"the best fits of the two halves share {shared} of {k} atoms at |cos| > {MATCH_COS:g} (at least "
                  f"{need}); fits agree at mean matched |cos| {mean_cos:.3f} (self floor {floor:.3f})")
