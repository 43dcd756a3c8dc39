"""``evaluate_postprocessing``: the downstream protocol of Nelson et al. (Tables 3, 4, 6).

Four versions of the same embeddings, each scored on the same tasks and folds:

* ``base``: the rows as given;
* ``pca``: PCA-whitened (:class:`actkit.Whitener`, ``n_components`` kept);
* ``pca+ica``: whitened, then rotated by :class:`actkit.FastICA` (``whiten=False``);
* ``pca+rand``: whitened, then rotated by ``n_rotations`` Haar-random orthogonal matrices.

No leakage: in every fold the whitening and the ICA are fitted on that fold's training rows
only (the rotations depend on no data); the test rows are only transformed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from actkit._data import as_array, iter_blocks, n_features, n_rows
from actkit._rows import sample_rows
from actkit._threads import use_threads
from actkit.errors import ValidationError
from actkit.evaluation._result import VERSIONS, EvaluationResult
from actkit.evaluation._scores import (LIGHTGBM_MAX_BIN, LIGHTGBM_PARAMS, LIGHTGBM_ROUNDS, SharedBins, auroc,
                                       between_class_variance, concentration, lightgbm_params, make_classifier,
                                       sparsity)
from actkit.evaluation._tasks import as_labels, build_tasks

__all__ = ["evaluate_postprocessing", "haar_rotation"]

CLASSIFIERS = ("lightgbm", "logistic")
MAX_TRAIN_ROWS = 5000


def haar_rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    """A (d, d) orthogonal matrix drawn from the Haar measure (QR of a Gaussian matrix, with
    the signs of R's diagonal moved into Q, Mezzadri 2007)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _load(X) -> np.ndarray:
    try:
        n, d = n_rows(X), n_features(X)
    except Exception:
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValidationError(f"embeddings must be a 2-D (rows, features) matrix, got shape {X.shape}") from None
        n, d = X.shape
    if isinstance(X, np.ndarray) or hasattr(X, "detach"):
        out = as_array(X, dtype=np.float32)
    else:  # a store layer, an h5py dataset, an embedding file: read in blocks
        out = np.empty((n, d), np.float32)
        start = 0
        for block in iter_blocks(X, dtype=np.float32):
            out[start:start + len(block)] = block
            start += len(block)
    if out.ndim != 2:
        raise ValidationError(f"embeddings must be a 2-D (rows, features) matrix, got shape {out.shape}")
    bad = ~np.isfinite(out).all(axis=1)
    if bad.any():
        raise ValidationError(f"the embeddings have NaN or Inf values (first in row {int(np.flatnonzero(bad)[0])}); "
                              "clean them first")
    return out


def _check(n_splits, n_rotations, classifier, max_train_rows, n_components, d):
    if classifier not in CLASSIFIERS:
        raise ValidationError(f"classifier must be one of {', '.join(CLASSIFIERS)}, got {classifier!r}")
    if not isinstance(n_splits, (int, np.integer)) or n_splits < 2:
        raise ValidationError(f"n_splits must be an integer >= 2, got {n_splits!r}")
    if not isinstance(n_rotations, (int, np.integer)) or n_rotations < 1:
        raise ValidationError(f"n_rotations must be an integer >= 1, got {n_rotations!r}")
    if max_train_rows is not None and max_train_rows < 2:
        raise ValidationError(f"max_train_rows must be >= 2 or None, got {max_train_rows!r}")
    if n_components is not None and not 1 <= n_components <= d:
        raise ValidationError(f"n_components={n_components} must be between 1 and the {d} features")


def _train_subset(pos, neg, max_rows, rng, shared=None):
    """The classifier's training rows: all of them, or ``max_rows`` of them keeping up to half
    positives (the rarer class is kept whole when it fits). ``shared`` (a dict) keeps one draw
    of negatives per negative set and size: the tasks against one control share it."""
    if max_rows is None or len(pos) + len(neg) <= max_rows:
        return pos, neg
    n_pos = min(len(pos), max(max_rows // 2, max_rows - len(neg)))
    n_neg = min(len(neg), max_rows - n_pos)
    pick = lambda a, k: sample_rows(a, k, rng) if k < len(a) else a
    if shared is None:
        return pick(pos, n_pos), pick(neg, n_neg)
    key = (id(neg), n_neg)
    if key not in shared:
        shared[key] = (pick(neg, n_neg), neg)  # keep neg alive: its id stays unique
    return pick(pos, n_pos), shared[key][0]


def evaluate_postprocessing(X, y, *, control=None, groups=None, n_components=None, n_rotations=3,
                            classifier="lightgbm", n_splits=5, max_train_rows=MAX_TRAIN_ROWS, ica_fit_rows=50000,
                            ica_max_iter=200, max_bin=LIGHTGBM_MAX_BIN, random_state=0, n_jobs=None,
                            progress=None):
    """Does ICA post-processing make embeddings better for classification? (Nelson et al.)

    Parameters
    ----------
    X : array-like, store layer or embedding file layer of shape (n_rows, n_features)
        Read into memory as float32 (``n_rows * n_features * 4`` bytes, plus one transformed
        copy per version in flight: two at most).
    y : array-like of shape (n_rows,)
        One label per row (any type; compared as strings).
    control : str, optional
        The control label: every other label is classified against it. Default: each label
        against all other rows (one-vs-rest).
    groups : array-like of shape (n_rows,), optional
        Replicates of a label (the paper's guides): each group is its own task against the
        negatives, and a label's numbers are the mean over its groups.
    n_components : int, optional
        Whitened dimensions kept (default: all, the numerical rank).
    n_rotations : int, default=3
        Haar-random rotations of ``pca+rand`` per fold (mean and sd over them).
    classifier : {"lightgbm", "logistic"}, default="lightgbm"
        LightGBM with the hyperparameters of the paper's Table 6 (100 trees), or
        scikit-learn's L2 ``LogisticRegression`` (C=1), the rotation-invariant linear probe.
    n_splits : int, default=5
        Stratified folds (on the label, or the label and group).
    max_train_rows : int or None, default=5000
        The classifier of a task is fitted on at most this many of the fold's training rows:
        a seeded subset keeping up to half positives (the rarer class whole when it fits), the
        negatives drawn once per fold for all the tasks against one control; the test rows are
        always all scored. None: every training row.
    ica_fit_rows : int or None, default=50000
        FastICA is fitted on at most this many random training rows of the fold.
    ica_max_iter : int, default=200
    max_bin : int, default=63
        LightGBM's feature histogram bins (its own default: 255; the paper gives none). The
        bins of a version and fold are found once, on the union of its tasks' training rows.
    random_state : int, default=0
        Seeds the folds, subsets, FastICA, LightGBM and the rotations.
    n_jobs : int or None, default=None
        Classifier fits run at once (threads; each LightGBM fit uses one OpenMP thread: its
        threads spin-wait, and on a busy machine two threads per fit measured 20x slower
        than one); also the thread budget of the whitening and FastICA. None: actkit's thread
        policy (``OMP_NUM_THREADS``, else the CPUs not busy). Scores are bitwise equal for
        any ``n_jobs``.
    progress : bool or None
        tqdm bar over folds, versions and tasks (None: only on a terminal).

    Returns
    -------
    EvaluationResult
        ``to_dict()``: keys ``base``, ``pca``, ``pca+ica``, ``pca+rand``, each with
        ``auroc``, ``sparsity``, ``concentration`` and their ``*_sd`` over folds, overall and
        under ``tasks``; ``format_table()``: the paper's Table 3 shape.
    """
    from sklearn.model_selection import StratifiedKFold  # ~0.5 s at import (measured), only when evaluating
    from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

    X = _load(X)
    n, d = X.shape
    _check(n_splits, n_rotations, classifier, max_train_rows, n_components, d)
    if not isinstance(max_bin, (int, np.integer)) or isinstance(max_bin, bool) or max_bin < 2:
        raise ValidationError(f"max_bin must be an integer >= 2, got {max_bin!r}")
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer))
                               or n_jobs < 1):
        raise ValidationError(f"n_jobs must be a positive integer, got {n_jobs!r}")
    y = as_labels(y, n)
    g = None if groups is None else as_labels(groups, n, what="groups")
    tasks, strata = build_tasks(y, control=control, groups=g, n_splits=n_splits)
    folds = list(StratifiedKFold(n_splits, shuffle=True, random_state=random_state).split(np.zeros(n), strata))
    n_sub = [len(t.positives) for t in tasks]
    # scores[version][task][sub-task] -> (n_versions_draws, n_splits, 3): auroc, sparsity, concentration
    draws = {v: (n_rotations if v == "pca+rand" else 1) for v in VERSIONS}
    scores = {v: [np.full((k, draws[v], n_splits, 3), np.nan) for k in n_sub] for v in VERSIONS}
    total = n_splits * sum(draws.values()) * len(tasks)
    bar = tqdm(total=total, desc="evaluate", unit="task", disable=None if progress is None else not progress)
    run = _Run(scores, bar, n_splits, draws, classifier, random_state, max_bin, control is None and groups is None)
    with use_threads(None if n_jobs is None else int(n_jobs)) as workers, ThreadPoolExecutor(workers) as pool:
        ica_info = [run.fold(pool, X, f, train, test, tasks, n_components=n_components, n_rotations=n_rotations,
                             max_train_rows=max_train_rows, ica_fit_rows=ica_fit_rows, ica_max_iter=ica_max_iter)
                    for f, (train, test) in enumerate(folds)]
        run.drain(0)
    bar.close()
    settings = {"control": None if control is None else str(control), "groups": groups is not None,
                "n_components": n_components, "n_rotations": n_rotations, "classifier": classifier,
                "n_splits": n_splits, "max_train_rows": max_train_rows, "ica_fit_rows": ica_fit_rows,
                "ica_max_iter": ica_max_iter, "random_state": random_state}
    if classifier == "lightgbm":
        settings["lightgbm"] = {**LIGHTGBM_PARAMS, "n_estimators": LIGHTGBM_ROUNDS, "max_bin": int(max_bin)}
    return EvaluationResult(tasks=tasks, scores=scores, settings=settings, n_rows=n, n_features=d, ica=ica_info)


class _Run:
    """The folds of one evaluation. In each fold the versions are made one after the other in
    this thread (whitening, FastICA, rotation, LightGBM binning) while the worker threads fit
    the classifiers of the version before: at most two versions' rows are held at once."""

    def __init__(self, scores, bar, n_splits, draws, classifier, random_state, max_bin, complement):
        self.scores, self.bar, self.n_splits, self.draws = scores, bar, n_splits, draws
        self.classifier, self.random_state, self.complement = classifier, random_state, complement
        self.max_bin, self.pending = max_bin, []

    def fold(self, pool, X, f, train, test, tasks, *, n_components, n_rotations, max_train_rows, ica_fit_rows,
             ica_max_iter):
        from actkit import (  # the estimators (sklearn, scipy): ~1 s at import, measured; export and report import this room for its labels and results
            FastICA, Whitener)

        in_train = np.zeros(len(X), bool)
        in_train[train] = True
        rng = np.random.default_rng([self.random_state, f])
        whitener = Whitener(n_components=n_components).fit(X[train])
        fit_rows = train if ica_fit_rows is None or len(train) <= ica_fit_rows else \
            sample_rows(train, ica_fit_rows, rng)
        Z = whitener.transform(X).astype(np.float32)
        ica = FastICA(whiten=False, max_iter=ica_max_iter, random_state=int(rng.integers(2**31))).fit(Z[fit_rows])
        info = {"fold": f, "n_components": int(whitener.n_components_), "converged": bool(ica.converged_),
                "n_iter": int(ica.n_iter_), "fit_rows": len(fit_rows)}
        splits = _fold_tasks(tasks, in_train, max_train_rows, rng)
        rotations = [haar_rotation(Z.shape[1], rng).astype(np.float32) for _ in range(n_rotations)]
        jobs = [(t, k, split) for t, task_splits in enumerate(splits) for k, split in enumerate(task_splits)]
        bins_rows = np.unique(np.concatenate([np.concatenate(s[:2]) for _, _, s in jobs]))
        needed = np.union1d(bins_rows, test)  # a rotation is applied to these rows only
        z_sums = _Sums(Z)
        for v in VERSIONS:
            for r in range(self.draws[v]):
                if v in ("base", "pca"):
                    V = _Version(X if v == "base" else Z)
                else:
                    V = _Version(Z, ica.components_.T if v == "pca+ica" else rotations[r], needed, z_sums)
                bins = None
                if self.classifier == "lightgbm":
                    bins = SharedBins(V.rows(bins_rows), bins_rows, lightgbm_params(self.random_state, self.max_bin))
                futures = [pool.submit(_score, V, self.classifier, self.random_state, bins, split,
                                       (train, test), self.complement) for _, _, split in jobs]
                rot = f" rotation {r + 1}" if self.draws[v] > 1 else ""
                self.pending.append((f"fold {f + 1}/{self.n_splits} {v}{rot}", v, r, f, jobs, futures, len(splits)))
                del V, bins
                self.drain(1)
        return info

    def drain(self, keep):
        """Collect the scores of the pending versions but the last ``keep``."""
        while len(self.pending) > keep:
            label, v, r, f, jobs, futures, n_tasks = self.pending.pop(0)
            self.bar.set_postfix_str(label)
            done = [0] * n_tasks
            for (t, k, _), future in zip(jobs, futures):
                self.scores[v][t][k, r, f] = future.result()
                done[t] += 1
                if done[t] == len(self.scores[v][t]):
                    self.bar.update(1)


def _fold_tasks(tasks, in_train, max_train_rows, rng):
    """Per task and sub-task: (classifier's positive / negative training rows, all training
    positives / negatives, test positives / negatives)."""
    out, shared, negatives = [], {}, {}
    for task in tasks:
        key = id(task.negatives)  # the tasks against one control share one array: one split of it
        if key not in negatives:
            negatives[key] = (task.negatives[in_train[task.negatives]], task.negatives[~in_train[task.negatives]])
        neg_tr, neg_te = negatives[key]
        subs = []
        for pos in task.positives:
            pos_tr, pos_te = pos[in_train[pos]], pos[~in_train[pos]]
            fit_pos, fit_neg = _train_subset(pos_tr, neg_tr, max_train_rows, rng, shared)
            subs.append((fit_pos, fit_neg, pos_tr, neg_tr, pos_te, neg_te))
        out.append(subs)
    return out


class _Sums:
    """Column sums (float64) of row sets of a matrix, each computed once per fold (the
    negatives are shared by every task against one control)."""

    def __init__(self, V):
        self.V, self.cache = V, {}

    def __call__(self, rows):
        key = (id(rows), len(rows))
        if key not in self.cache:
            self.cache[key] = (self.V[rows].sum(axis=0, dtype=np.float64), rows)  # keep rows alive: ids stay unique
        return self.cache[key][0]


class _Version:
    """The rows of one version of a fold, as the scores read them.

    ``_Version(M)``: the matrix M itself (Base, PCA). ``_Version(Z, R, needed, z_sums)``: the
    whitened rows Z rotated by R (PCA+ICA, PCA+Rand), computed for the ``needed`` rows only
    (the fold's test rows and the classifiers' training rows); the column sums of any rows
    are those of Z rotated, ``sum(Z[rows]) @ R``, since the rotation is linear.
    """

    def __init__(self, M, R=None, needed=None, z_sums=None):
        self.cache = {}
        if R is None:
            self.M, self.where, self.sums = M, None, _Sums(M)
            return
        self.M = M[needed] @ np.asarray(R, np.float32)
        self.where = np.full(len(M), -1, np.int64)
        self.where[needed] = np.arange(len(needed))
        R64 = np.asarray(R, np.float64)
        self.sums = lambda rows: z_sums(rows) @ R64

    def rows(self, rows):
        if self.where is None:
            return self.M[rows]
        at = self.where[rows]
        if at.size and at.min() < 0:
            raise RuntimeError("a rotated version was read on a row it was not computed for")
        return self.M[at]

    def shared_rows(self, rows):
        """``rows(rows)``, kept for the other tasks of the version (the control's test rows)."""
        key = (id(rows), len(rows))
        if key not in self.cache:
            self.cache[key] = (self.rows(rows), rows)
        return self.cache[key][0]


def _score(V, classifier, random_state, bins, split, fold, complement):
    fit_pos, fit_neg, tr_pos, tr_neg, te_pos, te_neg = split
    train, test = fold
    fit_rows = np.concatenate([fit_pos, fit_neg])
    fit_y = np.r_[np.ones(len(fit_pos)), np.zeros(len(fit_neg))].astype(np.int64)
    X_pos = V.rows(te_pos)
    X_neg = V.rows(te_neg) if complement else V.shared_rows(te_neg)
    if bins is not None:  # LightGBM on the version's shared binned rows
        a = bins.auroc(fit_rows, fit_y, X_pos, X_neg)
    else:
        a = auroc(make_classifier(classifier, random_state), V.rows(fit_rows), fit_y, X_pos, X_neg)
    sums = V.sums
    s_tr_pos, s_te_pos = sums(tr_pos), sums(te_pos)
    if complement:  # one-vs-rest: the negatives are every other row of the fold
        s_tr_neg, s_te_neg = sums(train) - s_tr_pos, sums(test) - s_te_pos
    else:
        s_tr_neg, s_te_neg = sums(tr_neg), sums(te_neg)
    s = sparsity(X_pos, s_tr_neg / len(tr_neg))
    b_train = between_class_variance(s_tr_pos, len(tr_pos), s_tr_neg, len(tr_neg))
    b_test = between_class_variance(s_te_pos, len(te_pos), s_te_neg, len(te_neg))
    return a, s, concentration(b_train, b_test)
