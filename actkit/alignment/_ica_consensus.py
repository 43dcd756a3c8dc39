"""Which ICA sources are identified: the consensus of several FastICA restarts.

On real activations FastICA's symmetric solution is one of many local optima, and a
solver stopped at ``tol`` sits anywhere on the flat valleys of the near-Gaussian
directions: a tiny perturbation of the rows (float noise, another batch size, another CPU)
sends it elsewhere, and only some sources recur. On each side alone, two restarts
*agree* on a source when the Hungarian match on ``|cos|`` pairs it with ``|cos| >=
IDENTIFIED_COS``; its estimate is the sign-aligned mean of its versions (made orthonormal).
:func:`pair_sources` gives, for each pair of restarts, the sources the two agree on (the
identified sources of that pair's map); :func:`identified_sources` those every restart
finds (what ``compare`` counts as ``ica_identified``).

The rest of the whitened space is the **unidentified subspace** (mapped by the convention
of ``ICAAlignment``). The definitions are written out in ``docs/definitions.md`` ("ICA
alignment").
"""

from __future__ import annotations

import numpy as np

from actkit._matching import match_columns

#: Two restarts agree on a source when they find it with at least this |cos| (an angle of
#: at most 0.1 rad). Chosen on the demo's Pythia-tiny pair (10000 rows, 63 components, the
#: sources all of 3 restarts find): a representation against its copy with 1e-6 float
#: noise aligned by ICA to 0.013 at 0.98, 0.006 at 0.99 and 0.0016 at 0.995, and the
#: cross-seed ica error moved by 0.004, 0.007 and 6e-6 under that noise.
IDENTIFIED_COS = 0.995


def _orthonormal_rows(U):
    """Symmetric orthonormalisation ``(U U')^{-1/2} U`` (the closest orthonormal rows)."""
    if not U.shape[0]:
        return U
    u, _, vt = np.linalg.svd(U, full_matrices=False)
    return u @ vt


def _matched(ref, W):
    """``W``'s rows matched to ``ref``'s (Hungarian on |cos|: :func:`actkit.metrics.match_columns`),
    signs aligned; and |cos|."""
    C = ref @ W.T
    r, c, signs = match_columns(C)
    V = np.zeros_like(ref)
    V[r] = signs[:, None] * W[c]
    cos = np.zeros(ref.shape[0])
    cos[r] = np.abs(C[r, c])
    return V, cos


def identified_sources(rotations, cos=IDENTIFIED_COS):
    """The sources found by every restart: their consensus and each restart's version.

    Parameters
    ----------
    rotations : list of ndarray, each (k, k)
        Orthogonal FastICA rotations of the same whitened rows, one per restart.
    cos : float, default=IDENTIFIED_COS

    Returns
    -------
    U : ndarray of shape (m, k)
        Sign-aligned mean of each identified source's versions, made orthonormal, in the
        first restart's order. With a single restart every source counts as identified
        (the classic ICA alignment, which depends on FastICA's local optimum).
    versions : list of ndarray, each (m, k)
        Each restart's own version of the identified sources (signs aligned to the first).
    """
    ref = rotations[0]
    k = ref.shape[0]
    versions = [ref]
    worst = np.ones(k)
    for W in rotations[1:]:
        V, c = _matched(ref, W)
        versions.append(V)
        worst = np.minimum(worst, c)
    keep = worst >= cos if len(rotations) > 1 else np.ones(k, bool)
    versions = [V[keep] for V in versions]
    return _orthonormal_rows(np.mean(versions, axis=0)), versions


def pair_sources(rotations, cos=IDENTIFIED_COS):
    """For each pair of restarts ``(r, s)``, ``r < s``: the sources the two share.

    A source of restart ``r`` is shared when its Hungarian match in restart ``s`` has
    ``|cos| >= cos``; its estimate is the sign-aligned mean of the two versions (the set
    made orthonormal). Returns a list of ``R (R - 1) / 2`` arrays of shape ``(m_rs, k)``.
    """
    out = []
    for r in range(len(rotations)):
        for s in range(r + 1, len(rotations)):
            V, c = _matched(rotations[r], rotations[s])
            keep = c >= cos
            out.append(_orthonormal_rows(0.5 * (rotations[r][keep] + V[keep])))
    return out


def side_rotation(identified, k):
    """Orthogonal (k, k) rotation of whitened coordinates: identified sources first.

    Rows ``[:m]`` are the identified sources (orthonormal), rows ``[m:]`` an orthonormal
    basis of their complement (any basis: ``ICAAlignment`` maps the complement by a rule
    that does not depend on it). Returns ``(rotation, m)``.
    """
    U = _orthonormal_rows(np.asarray(identified, dtype=np.float64).reshape(-1, k))
    m = U.shape[0]
    if m == 0:
        return np.eye(k), 0
    if m == k:
        return U, m
    C = np.linalg.svd(U, full_matrices=True)[2][m:]     # basis of the complement of U's rows
    return np.vstack([U, C]), m
