"""``actkit.compare_bases``: which basis of a layer gives interpretable units -- the neurons,
PCA, ICA, dictionaries, SAEs and the random-rotation control scored the same way, with
bootstrap intervals by input sample (docs/bases.md).

Every basis is read by the pass of a unit report (:func:`actkit.units`) with the token scores
folded in, plus its held-out pass; the plan of the scores (each row's token and the fit/held-out
split by input sample) and the resamples are drawn once and shared, so every basis is scored on
the same rows and two bases' differences are paired.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from actkit._device import check_device
from actkit._groups import bootstrap_draws
from actkit._units._api import _add_labels, _inputs, _int, _labels, _report, _run_pass, open_units_store
from actkit._units._basis import Basis, resolve_basis
from actkit._units._comparison import BasisComparison, assemble
from actkit._units._pass import oriented
from actkit._units._probe import Probes
from actkit._units._score_plan import check_split, plan_scores
from actkit._units._summary import TOP_FACTOR
from actkit._units._tokens import K_TOKENS
from actkit._units._unit_scores import Scoring
from actkit.errors import InputError

__all__ = ["CONTROLS", "compare_bases"]

#: the controls a comparison can add
CONTROLS = ("random_rotation",)
#: tokens either side of the examples of the best and worst units' cards
CONTEXT = 8
#: best and worst units (by token R^2) a comparison shows with their examples
SHOWN = 5


class RandomRotation:
    """A random orthogonal basis of a PCA-whitened space: ``transform(X) = whiten(X) @ Q``
    (``whiten``: a fitted :class:`~actkit.Whitener`, or None where the rows are whitened
    already), ``Q`` Haar-distributed (the QR of a Gaussian matrix, signs fixed by R's diagonal)
    drawn by ``np.random.default_rng([random_state, 7])``."""

    def __init__(self, width, whitener=None, random_state=0):
        rng = np.random.default_rng([int(random_state), 7])
        q, r = np.linalg.qr(rng.normal(size=(width, width)))
        self.rotation_ = (q * np.where(np.diag(r) < 0, -1.0, 1.0)).astype(np.float32)
        self.whitener = whitener

    def transform(self, X):
        Z = np.asarray(X, np.float32) if self.whitener is None else np.asarray(self.whitener.transform(X), np.float32)
        return Z @ self.rotation_


def _check(k, eval_fraction, max_rows, bootstrap, confidence, controls):
    """The arguments' one-line errors, before any work."""
    from actkit.inference import bootstrap_floor_error  # issue 39's floor of the bootstrap

    k = _int("k", k, 1)
    check_split(eval_fraction, max_rows)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)) \
            or not 0 < float(confidence) < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    bootstrap = _int("bootstrap", bootstrap, 0)
    message = bootstrap_floor_error(bootstrap, float(confidence))
    if message:
        raise InputError(message)
    controls = tuple(controls or ())
    bad = [c for c in controls if c not in CONTROLS]
    if bad:
        raise InputError(f"controls: unknown {', '.join(map(repr, bad))}; the controls are {', '.join(CONTROLS)}")
    return k, bootstrap, controls


def _identity(basis):
    """What makes two bases the same basis: a path (resolved), else the object."""
    if basis is None:
        return ("neurons",)
    if isinstance(basis, (str, os.PathLike)):
        return ("path", str(Path(basis).expanduser().resolve()))
    return ("object", id(basis))


def _named(bases):
    """``[(name, basis)]``: the neurons first, then ``bases`` (a list or a dict of name ->
    basis); one line for a basis given twice."""
    items = list(bases.items()) if isinstance(bases, dict) else [(None, b) for b in (bases or [])]
    seen, out = {("neurons",): "neurons"}, [("neurons", None)]
    for name, b in items:
        key = _identity(b)
        if key in seen:
            raise InputError(f"bases: {b if b is not None else 'the neurons'} given twice (the neurons are always "
                             f"compared); give each basis once")
        seen[key] = name
        out.append((name, b))
    return out


def _resolve(named, store, layer, device):
    """``[(name, Basis)]`` with unique names (a basis's kind, numbered where repeated)."""
    out, used = [], set()
    for name, b in named:
        basis = resolve_basis(b, store, layer, device=device)
        name = name or basis.kind
        base, i = name, 2
        while name in used:
            name, i = f"{base}-{i}", i + 1
        used.add(name)
        out.append((name, basis))
    return out


def _recorded(store, inputs):
    """The recorded inputs (the store's, or re-attached from a path): token scores need them."""
    if inputs is False or (inputs is None and getattr(store, "inputs", None) is None):
        raise InputError(f"{store.path} does not record its inputs, and token scores need each row's token; "
                         "pass inputs=PATH (--inputs) to re-attach them")
    return _inputs(store, inputs)


def _draws(plan, bootstrap, random_state):
    """(B, sample ids) multiplicities of the input samples in each resample (None without)."""
    if not bootstrap:
        return None
    from actkit.inference import MIN_SAMPLES  # the fewest input samples a resampling accepts

    ids = np.unique(plan.sample)
    if ids.size < MIN_SAMPLES:
        raise InputError(f"bootstrap: the layer has {ids.size} input samples; resampling needs at least {MIN_SAMPLES}")
    out = np.zeros((bootstrap, int(ids.max()) + 1))
    out[:, ids] = bootstrap_draws(ids.size, bootstrap, random_state)
    return out


def _probes(plan, codes, names, random_state):
    """The k-sparse probing tasks (one label per input sample), or ``(None, note)``."""
    if codes is None:
        return None, None
    lo = np.full(plan.sample.max() + 1, np.iinfo(np.int64).max)
    hi = np.full(plan.sample.max() + 1, -1)
    np.minimum.at(lo, plan.sample, codes)
    np.maximum.at(hi, plan.sample, codes)
    if np.any(lo[plan.scored] != hi[plan.scored]):
        return None, "k-sparse probing needs one label per input sample; these labels vary within samples"
    pooled = np.bincount(plan.pool_slot[plan.pool_slot >= 0], minlength=plan.scored.size)
    probes = Probes(lo[plan.scored], names, np.isin(plan.scored, plan.heldout), pooled, plan.scored, random_state)
    note = (f"k-sparse probing leaves out labels with fewer than its minimum of samples: {', '.join(probes.skipped)}"
            if probes.skipped else None)
    return probes, note


def _rotation(store, layer, bases, random_state, progress):
    """The random-rotation control: a Haar rotation of the PCA basis given (its rows), else of
    a :class:`~actkit.Whitener` fitted on the layer."""
    pca = next((b for _, b in bases if b.kind == "pca" and b.transformer is None and b.sae is None
                and b.source != "neurons"), None)
    if pca is not None:
        rows, whitener, width, dew = pca.rows, None, pca.n_units, pca.directions()
    else:
        from actkit.whitening import Whitener  # the layer's own PCA whitening (one streamed pass)

        whitener = Whitener(method="pca").fit(store[layer])
        rows, width, dew = store[layer], whitener.n_components_, np.asarray(whitener.dewhitening_).T
    rot = RandomRotation(width, whitener, random_state)
    directions = None if dew is None else rot.rotation_.T.astype(np.float64) @ dew
    b = Basis("random_rotation", rows, width, source="random rotation of the PCA-whitened layer", directions=directions)
    b.transformer = rot
    return b


def _label_aurocs(stats, names):
    """Every unit's label selectivity (the report shows only some units): ``(aurocs (n_units,),
    summary)`` as :func:`actkit.units` reports them, or ``(None, None)`` without labels;
    ``stats``: the pass's result as the report orients it."""
    if names is None:
        return None, None
    dicts = [{"unit": j} for j in range(stats.n_units)]
    summary = _add_labels(dicts, stats, names)
    return np.array([d["label"]["auroc"] if d.get("label") else np.nan for d in dicts]), summary


def _score_basis(store, layer, basis, k, labels, rec, plan, draws, probes, random_state, progress, scheduler):
    """One basis: its Scoring (every unit's scores) and its unit report of the units it shows
    (the best and the worst by token R^2: rendering every unit's examples is a units report's
    work, not a comparison's)."""
    codes, names, note = labels
    scoring = Scoring(plan, draws=draws, probes=None if probes is None else probes.fresh())
    stats = _run_pass(basis, k, codes, 1 if names is None else len(names), random_state, scheduler, progress,
                      scoring)
    scoring.shown = scoring.best_and_worst(SHOWN)
    ids = scoring.shown[0] + scoring.shown[1] or [0]
    report = scoring.attach(_report(store, layer, basis, stats, k, CONTEXT, ids, None, rec, (names, note),
                                    random_state), rec)
    flip = np.zeros(basis.n_units, bool)
    flip[np.asarray(scoring.flipped, np.int64)] = True
    scoring.label_auroc, scoring.labels = _label_aurocs(oriented(stats, flip), names)
    return report, scoring


def compare_bases(store, layer=None, *, bases, k=20, labels=None, max_rows=None, eval_fraction=0.2, bootstrap=200,
                  confidence=0.95, random_state=0, controls=CONTROLS, progress=None, inputs=None,
                  device="cpu", scheduler=None) -> BasisComparison:
    """Score the units of several bases of one layer the same way, side by side.

    Every basis gets, per unit, ``token_purity``, ``token_r2``, ``context_r2`` (and
    ``label_auroc`` with labels; docs/definitions.md, section 7), summarised over its units
    (median, mean, 90th percentile, share at or above a threshold) with a bootstrap interval that
    resamples input samples (centred percentile: :func:`actkit._units._summary.centred_interval`); with labels, the labels that have a unit of their
    own (AUROC >= 0.9) and SAEBench's k-sparse probing (k = 1, 2, 5); and a verdict for every
    pair of bases.

    Parameters
    ----------
    store : str, os.PathLike or Store
        A store that records its inputs (or ``inputs=``): the scores need each row's token.
    layer : str, optional
    bases : list or dict of name -> basis
        Bases as :func:`actkit.units` takes them (whiten / ica / dictionary stores, SAE
        folders, codes files, fitted estimators); the layer's neurons are always compared.
    k : int, default=20
        Top rows per unit (the token purity's ``k``).
    labels : array-like of shape (n_rows,) or (n_samples,), or str, optional
        One label per row or per input sample, or a label file (as ``actkit evaluate`` reads).
    max_rows : int, optional
        Score the token R^2 on whole input samples up to this many rows.
    eval_fraction : float, default=0.2
        Held-out share of input samples (a seeded choice by ``random_state``).
    bootstrap : int, default=200
        Resamples of the input samples (0: no intervals; else at least ``2 / (1 - confidence)``).
    confidence : float, default=0.95
    random_state : int, default=0
        Seeds the split, the resamples, the rotation and the probing tasks.
    controls : tuple of str, default=("random_rotation",)
        ``"random_rotation"``: a random orthogonal basis of the layer's PCA-whitened space, the
        chance level of "axis-aligned".
    progress : bool, optional
    inputs : None or str
        Re-attach the inputs of a store that did not record them.
    device : str, default="cpu"
        Torch device of SAE bases.
    scheduler : None, str or distributed.Client
        Run every basis's passes on Dask (``docs/dask.md``); the same result as here.

    Returns
    -------
    BasisComparison

    Notes
    -----
    Memory: per basis, the units pass's state, the per-key sums of the scores (bounded by
    :data:`actkit._units._scores.SCORE_BYTES`; units in chunks beyond), ``bootstrap x units``
    resampled scores and ``3 k x units`` top rows; never the rows x units matrix.
    """
    check_device(device)  # a bad device is refused before any work
    k, bootstrap, controls = _check(k, eval_fraction, max_rows, bootstrap, confidence, controls)
    named = _named(bases)
    store, layer, opened = open_units_store(store, layer)
    try:
        resolved = _resolve(named, store, layer, device)
        labels = _labels(labels, store[layer], int(store[layer].shape[0]))   # (codes, names, note)
        rec = _recorded(store, inputs)
        plan = plan_scores(store[layer], rec, eval_fraction=eval_fraction, max_rows=max_rows,
                           random_state=random_state, top=max(TOP_FACTOR * k, K_TOKENS), pool=labels[0] is not None)
        if plan is None:
            raise InputError(f"layer {layer}: token scores need rows of tokens or patches (not pooled rows) from "
                             f"enough input samples to hold out eval_fraction={eval_fraction:g} of them and fit on "
                             "the rest")
        draws = _draws(plan, bootstrap, random_state)
        probes, note = _probes(plan, labels[0], labels[1], random_state)
        if "random_rotation" in controls:
            resolved.append(("random_rotation", _rotation(store, layer, resolved, random_state, progress)))
        runs = [(name, *_score_basis(store, layer, b, k, labels, rec, plan, draws, probes, random_state,
                                     progress, scheduler)) for name, b in resolved]
        return assemble(store, layer, runs, plan, draws, k=k, confidence=confidence, bootstrap=bootstrap,
                        controls=controls, notes=[note] if note else [])
    finally:
        if opened and hasattr(store, "close"):
            store.close()
