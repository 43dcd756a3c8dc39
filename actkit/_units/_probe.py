"""k-sparse probing of a basis's units, as SAEBench's ``sparse_probing`` eval computes it
(Karvonen et al. 2025; Gurnee et al. 2023): on each input sample's mean-pooled unit
activations (the mean over its rows, special tokens left out), for every label one against the
rest on a balanced task, the ``k`` units with the largest absolute difference of class means on
the fit split, a logistic probe on those ``k`` units (scikit-learn's ``LogisticRegression``,
L2, ``C=1``, ``max_iter=1000``), its accuracy on the held-out samples; averaged over labels.

The balanced task of label ``c`` (fit and held-out split each, as SAEBench's
``prepare_probe_data``): every sample of ``c``, and as many samples of the other labels, drawn
``ceil(n_c / (labels - 1))`` from each other label and then ``n_c`` of those at random (where
the other labels hold fewer, as many of ``c`` as there are others). Draws are seeded by
``random_state`` and the label.

The units are scored a chunk at a time (:mod:`actkit._units._scores`): each chunk keeps, per
label, its ``max(ks)`` units of the largest difference and their pooled rows, so a basis of any
width needs only ``labels x max(ks)`` pooled columns at the end.
"""

from __future__ import annotations

import math

import numpy as np

from actkit._units._summary import centred_interval

__all__ = ["KS", "MIN_POSITIVES", "Probes"]

#: numbers of units of the k-sparse probes (SAEBench's defaults)
KS = (1, 2, 5)
#: a label is probed where it has at least this many samples in the fit split and 2 held out
MIN_POSITIVES = 4


def _balanced(idx, y, c, rng):
    """SAEBench's balanced one-vs-rest task of label ``c`` over the samples ``idx`` (labels
    ``y``): ``(samples, targets)``, positives first then negatives."""
    pos = idx[y == c]
    others = [idx[y == o] for o in np.unique(y) if o != c]
    if not others or pos.size == 0:
        return None
    per = math.ceil(pos.size / len(others))
    neg = np.concatenate([rng.permutation(o)[:per] for o in others])
    neg = rng.permutation(neg)[:pos.size]
    pos = rng.permutation(pos)[:neg.size]
    return np.concatenate([pos, neg]), np.r_[np.ones(pos.size, int), np.zeros(neg.size, int)]


def _resampled(draws, samples, hits):
    """(B,) the accuracy averaged over labels in each resample: each label's held-out samples
    weighted by their multiplicity (a label none of whose samples is drawn is left out)."""
    per = []
    for ts, ok in hits:
        W = draws[:, samples[ts]]
        total = W.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            per.append(np.where(total > 0, (W @ ok) / total, np.nan))
    with np.errstate(invalid="ignore"):
        return np.nanmean(np.stack(per), axis=0)


class Probes:
    """The probing tasks of one layer (shared by its bases) and one basis's candidates.

    Parameters
    ----------
    labels : ndarray of shape (n_scored,), int
        The label of each scored input sample (``ScorePlan.scored``).
    names : list of str
    heldout : ndarray of shape (n_scored,), bool
        Whether each scored sample is held out.
    pooled : ndarray of shape (n_scored,)
        Rows pooled per sample (non-special); a sample without is left out.
    samples : ndarray of shape (n_scored,), int
        The scored samples' ids (for the bootstrap's multiplicities).
    random_state : int
    """

    def __init__(self, labels, names, heldout, pooled, samples, random_state=0, ks=KS):
        self.names, self.ks, self.pooled, self.samples = list(names), tuple(ks), np.asarray(pooled, float), samples
        self.tasks, self.skipped = {}, []
        usable = self.pooled > 0
        labels = np.asarray(labels)
        for c, name in enumerate(self.names):
            rng = np.random.default_rng([int(random_state), 6, c])
            fit_idx, test_idx = np.flatnonzero(usable & ~heldout), np.flatnonzero(usable & heldout)
            fit, test = _balanced(fit_idx, labels[fit_idx], c, rng), _balanced(test_idx, labels[test_idx], c, rng)
            if fit is None or test is None or fit[0].size < 2 * MIN_POSITIVES or test[0].size < 4:
                self.skipped.append(name)
                continue
            self.tasks[name] = (fit, test)
        self.candidates = {name: [] for name in self.tasks}

    def fresh(self) -> "Probes":
        """The same tasks with no candidates (one per basis)."""
        out = object.__new__(Probes)
        out.__dict__.update(self.__dict__)
        out.candidates = {name: [] for name in self.tasks}
        return out

    def add_units(self, lo, pool_sums):
        """Units ``lo:lo + w``: their pooled rows (sums, (n_scored, w)); per label the
        ``max(ks)`` units of the largest |difference of class means| on the fit task."""
        means = pool_sums / np.maximum(self.pooled, 1)[:, None]
        for name, ((fs, fy), (ts, _)) in self.tasks.items():
            diff = np.abs(means[fs[fy == 1]].mean(0) - means[fs[fy == 0]].mean(0))
            pick = np.argsort(-diff, kind="stable")[:max(self.ks)]
            cols = np.concatenate([fs, ts])
            self.candidates[name].append((lo + pick, diff[pick], means[np.ix_(cols, pick)]))

    def results(self, draws=None, confidence=0.95):
        """``{k: {"accuracy", "ci_low", "ci_high", "per_label": {name: accuracy}, "units":
        {name: [unit, ...]}}}``: the held-out accuracy of each label's k-unit probe, averaged
        over labels, with a centred percentile interval over ``draws`` (held-out samples resampled,
        the probes fixed); None without a task."""
        from sklearn.linear_model import LogisticRegression  # scikit-learn: only where labels are probed

        if not self.tasks:
            return None
        out = {}
        for k in self.ks:
            per, hits, units = {}, [], {}
            for name, ((fs, fy), (ts, ty)) in self.tasks.items():
                ids = np.concatenate([c[0] for c in self.candidates[name]])
                diff = np.concatenate([c[1] for c in self.candidates[name]])
                X = np.concatenate([c[2] for c in self.candidates[name]], axis=1)
                pick = np.lexsort((ids, -diff))[:k]
                clf = LogisticRegression(C=1.0, max_iter=1000).fit(X[:fs.size, pick], fy)
                ok = (clf.predict(X[fs.size:, pick]) == ty).astype(float)
                per[name], units[name] = float(ok.mean()), [int(u) for u in ids[pick]]
                hits.append((ts, ok))
            value = float(np.mean(list(per.values())))
            lo = hi = None
            if draws is not None and len(draws):
                lo, hi = centred_interval(_resampled(draws, self.samples, hits), value, confidence, 0.0, 1.0)
            out[k] = {"accuracy": value, "ci_low": lo, "ci_high": hi, "per_label": per, "units": units}
        return out
