"""``actkit.units``: validation, the one pass, and the report's data."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from actkit._device import check_device
from actkit._rows import block_rows
from actkit._units._acts import RowLookup, add_window_acts
from actkit._units._bands import DENSE, band_edges, band_examples, beyond_share, dead_units
from actkit._units._basis import DEFAULT_ORDER, resolve_basis
from actkit._units._examples import Renderer
from actkit._units._hist import trimmed
from actkit._units._lens import add_lens
from actkit._units._pass import finish, oriented, setup, unit_pass
from actkit._units._report import SCHEMA, UnitReport
from actkit._units._score_plan import check_split
from actkit._units._select import SELECTIVE_AUROC, selectivity
from actkit._units._unit_scores import Scoring
from actkit._units._tokens import K_TOKENS, add_top_tokens
from actkit.errors import InputError, LayerError

__all__ = ["ORDERS", "open_units_store", "units"]

ORDERS = ("skewness", "frequency", "variance", "kurtosis", "index")
MAX_CLASSES = 256
#: the most rows per block of the pass (its per-block statistics fit a core's cache better)
MAX_BLOCK_ROWS = 16384


def _int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _from_layer(store, layer):
    """``(store, layer)`` of a store's layer given as ``store`` (a layer knows its store); one
    line for an array in memory, which has no store."""
    if hasattr(store, "store") and hasattr(store, "name") and hasattr(store, "index"):  # a Layer, a MatrixLayer
        if getattr(store, "selected_rows", None) is not None:
            raise InputError("a selection of a layer's rows (select_rows) is not a layer: pass the store and the layer "
                             "name, and give the rows to match_units as rows=")
        if layer is not None and layer != store.name:
            raise LayerError(f"layer={layer!r}, but the layer given is {store.name!r}; give one of them")
        return store.store, store.name
    if isinstance(store, np.ndarray) or hasattr(store, "detach") or (hasattr(store, "__array__")
                                                                   and not hasattr(store, "layers")):
        raise InputError(f"units reads a store (a path, an open store or one of its layers), not an array in memory "
                         f"({type(store).__name__}): save it (np.save('x.npy', X)) and pass 'x.npy', which reads as "
                         "a one-layer store")
    return store, layer


def open_units_store(store, layer, flag="--layer"):
    """``(store, layer name, opened here)`` of a path, an open store or a store's layer; one
    line for a missing layer (naming ``flag``) or an array in memory."""
    store, layer = _from_layer(store, layer)
    opened = isinstance(store, (str, os.PathLike))
    if opened:
        from actkit.matrix_files import open_source  # stores and embedding files: the analysis commands' one door

        store = open_source(store)
    names = list(store.layers)
    bad = None
    if layer is None and len(names) != 1:
        bad = f"{store.path} has {len(names)} layers ({', '.join(names[:12])}); pick one with {flag}"
    elif layer is not None and layer not in names:
        bad = f"{store.path} has no layer {layer!r} (it has {', '.join(names[:12])}); pick one with {flag}"
    if bad:
        if opened:
            store.close()
        raise LayerError(bad)
    return store, layer or names[0], opened


def _inputs(store, inputs):
    """The recorded inputs to show examples with: ``inputs=False`` none; None the store's own
    (an error when it has none); a path re-attached by ``actkit.extractors.record_inputs``."""
    if inputs is False:
        return None
    if inputs is None:
        rec = getattr(store, "inputs", None)
        if rec is None:
            raise InputError(f"{store.path} does not record its inputs (an older store or an embedding file); "
                             "pass inputs=PATH (--inputs) to re-attach them, or inputs=False (--no-inputs) "
                             "for statistics without examples")
        if rec.kind == "text" and not rec.has_text:  # an older store: its text decoded from its ids
            from actkit.extractors import decoded_text  # the recorded tokenizer (jobs floor; local files only)

            rec = decoded_text(rec)
        return rec
    if hasattr(inputs, "kind") and hasattr(inputs, "n_samples"):
        return inputs
    from actkit.extractors import record_inputs  # re-attaching inputs reads them as extraction does (jobs floor)

    return record_inputs(store, inputs)


def _labels(labels, layer_obj, n):
    """``(codes (n,) int64, names, note)`` or ``(None, None, None)``; labels per input sample are
    spread over their rows (:func:`per_row_labels`)."""
    if labels is None:
        return None, None, None
    if isinstance(labels, (str, os.PathLike)):
        from actkit.evaluation import read_labels  # hand-off: the label files of actkit evaluate

        labels = read_labels(labels, layer=layer_obj)
    labels, note = per_row_labels(np.asarray(labels), layer_obj, n)
    # label coding (not input samples: those are actkit._groups')
    names, codes = np.unique(labels.astype(str), return_inverse=True)
    if names.size > MAX_CLASSES:
        raise InputError(f"labels: {names.size} distinct labels; at most {MAX_CLASSES} are scored per unit")
    return codes.astype(np.int64).ravel(), [str(x) for x in names], note


def per_row_labels(labels, layer_obj, n):
    """``(labels (n,), note)``: one label per row as given, or one per input sample of a layer
    with several rows per sample (per token, per patch) spread over the rows of its sample
    (``note`` says so; None otherwise). One line for any other length, and for labels per
    sample of rows without a sample index."""
    m = labels.shape[0] if labels.ndim else 0
    if labels.ndim == 1 and m == n:
        return labels, None
    index = getattr(layer_obj, "index", None) if labels.ndim == 1 else None
    if index is None:
        raise InputError(f"labels: {m} labels for {n} rows; give one label per row of the layer"
                         + ("" if labels.ndim != 1 else " (its rows carry no sample index, so labels per input "
                            "sample cannot be spread over them)"))
    samples = np.asarray(index)[:, 0]
    n_samples = int(samples.max()) + 1 if samples.size else 0
    if m != n_samples:
        raise InputError(f"labels: {m} labels for {n} rows of {n_samples} input samples; give one label per row "
                         "or one per input sample")
    return labels[samples], (f"{m} labels, one per input sample, spread over the {n:,} rows of their samples "
                             f"({n / max(m, 1):.1f} rows per sample)")


def _run_pass(basis, k, codes, n_classes, random_state, scheduler, progress, scoring=None):
    """The pass over the basis's rows (:mod:`actkit._units._pass`): its :class:`UnitStats`."""
    from actkit.runners import runner_for  # the runner decides where the pass runs

    rows = block_rows(max(basis.n_units, int(basis.rows.shape[1])), max_rows=MAX_BLOCK_ROWS)
    threads = basis.sae is None or str(getattr(basis.sae, "device", "cpu")) == "cpu"
    if scoring is not None:  # the token scores folded into the same pass, then the held-out rows
        return scoring.run(basis, k, rows, codes, n_classes, random_state, threads, scheduler, progress)
    st = setup(basis, k, labels=codes, classes=n_classes, random_state=random_state, flippable=basis.kind == "ica")
    with runner_for(basis.rows, scheduler, block_rows=rows) as (X, runner):
        return finish(runner.run(X, unit_pass(st, rows, threads=threads), desc="units", progress=progress), st)


def _orient(stats, basis):
    """ICA sources with negative skewness flipped (top <-> bottom, values negated): a new result."""
    return oriented(stats, stats.skewness < 0 if basis.kind == "ica" else np.zeros(basis.n_units, bool))


def _moments_table(stats):
    """Per unit (U,) arrays of the report's statistics, from the oriented result."""
    n = stats.n
    sd = np.sqrt(stats.variance)
    active = stats.active / max(n, 1)
    return {"n": int(n), "mean": stats.mean, "variance": stats.variance, "sd": sd, "skewness": stats.skewness,
            "kurtosis": stats.kurtosis, "active": active, "dead": dead_units(stats.vmin, stats.vmax),
            "beyond_3sd": beyond_share(stats.hist, stats.mean, sd, n), "dense": active >= DENSE}


def _order(order, table, basis):
    name = DEFAULT_ORDER[basis.kind] if order is None else order
    if not isinstance(name, str):
        ids = np.asarray(name, dtype=np.int64).ravel()
        if ids.size == 0 or ids.min() < 0 or ids.max() >= basis.n_units or np.unique(ids).size != ids.size:
            raise InputError(f"order: unit indices must be distinct, in [0, {basis.n_units})")
        return "custom", ids
    if name not in ORDERS:
        raise InputError(f"order must be one of {', '.join(ORDERS)} or a list of unit indices, got {name!r}")
    variance = table["variance"] if basis.variance is None else basis.variance  # PCA: explained, before whitening
    key = {"skewness": -table["skewness"], "frequency": -table["active"], "variance": -variance,
           "kurtosis": -table["kurtosis"], "index": np.arange(basis.n_units)}[name]
    ids = np.argsort(key, kind="stable")
    dead = table["dead"][ids]
    return name, np.concatenate([ids[~dead], ids[dead]])


def _examples(entries, index, renderer):
    return [renderer.example(r, v, index[r, 0], index[r, 1]) for r, v in entries]


def _unit_dicts(stats, table, basis, ids, k, index, renderer):
    """One dict per shown unit (the schema of :class:`UnitReport`), examples rendered."""
    out = []
    ids = np.asarray(ids, np.int64)
    top_rows = np.where(stats.top[0] > 0, stats.top[1], -1) if basis.sparse else stats.top[1]
    edges_of = band_edges(stats.hist, stats.n, stats.active, stats.vmax)
    for rank, j in enumerate(ids):
        j = int(j)
        top = [(int(r), float(v)) for v, r in zip(stats.top[0][:, j], top_rows[:, j]) if r >= 0]
        bottom = [] if basis.sparse else [(int(r), float(v)) for v, r in
                                          zip(stats.bottom[0][:, j], stats.bottom[1][:, j]) if r >= 0]
        counts, edges = trimmed(stats.hist, j)
        counts = counts.sum(axis=0)
        bands = band_examples(stats, edges_of, j, top_rows[:, j])
        for b in bands:
            b["examples"] = _examples(b["examples"], index, renderer)
        out.append({"unit": j, "rank": rank, "mean": table["mean"][j], "sd": table["sd"][j],
                    "variance": table["variance"][j], "skewness": table["skewness"][j],
                    "kurtosis": table["kurtosis"][j], "active_share": table["active"][j],
                    "beyond_3sd": table["beyond_3sd"][j],
                    "share_shown": "beyond_3sd" if table["dense"][j] else "active",
                    "dead": bool(table["dead"][j]), "flipped": bool(stats.flipped[j]),
                    "hist": {"counts": counts, "edges": edges}, "top": _examples(top, index, renderer),
                    "bottom": _examples(bottom, index, renderer), "bands": bands, "logits": None,
                    "label": None, "match": None})
    return out


def _add_labels(unit_dicts, stats, names):
    if names is None:
        return None
    own = set()
    for u in unit_dicts:
        counts, _ = trimmed(stats.hist, u["unit"])
        c, auc, mi = selectivity(counts)
        if c is None:
            continue
        u["label"] = {"name": names[c], "auroc": auc, "mutual_information": mi}
        if auc >= SELECTIVE_AUROC:
            own.add(names[c])
    return {"names": names, "with_own_unit": sorted(own), "count": len(own), "threshold": SELECTIVE_AUROC}


def units(store, layer=None, *, basis=None, k=20, context=8, labels=None, order=None, max_units=None,
          random_state=0, device="cpu", progress=None, inputs=None, scheduler=None,
          k_tokens=K_TOKENS, lens_raw=False, eval_fraction=0.2, max_rows=None) -> UnitReport:
    """What each unit of a layer responds to: top-``k`` examples, quantile bands, histogram,
    moments, logit lens and label selectivity, from one streaming pass over the rows.

    Parameters
    ----------
    store : str, os.PathLike or Store
        The store (or embedding file) whose layer is read.
    layer : str, optional
        The layer (needed when the store holds several).
    basis : None, str, os.PathLike or SparseAutoencoder
        None: the layer's own coordinates (neurons, channels); a store written by ``actkit
        whiten`` / ``ica`` / ``dictionary`` from this store (PCA components, ICA sources,
        dictionary atoms); an SAE folder or loaded SAE; an ``actkit-codes/1`` file of this
        store's layer. A basis made from another store or layer is refused.
    k : int, default=20
        Top (and bottom) examples per unit; ties broken by row order.
    context : int, default=8
        Tokens shown either side of a text example's token.
    labels : array-like of shape (n_rows,) or (n_samples,), or str, optional
        One label per row (or a label file / column as ``actkit evaluate`` reads it): per
        unit the label it is most selective for (one-vs-rest AUROC, mutual information).
        One label per input sample of a per-token or per-patch layer is given to every row of
        its sample (the report's ``labels["note"]`` says so).
    order : {"skewness", "frequency", "variance", "kurtosis", "index"} or list of int, optional
        The units' order (default: skewness for ICA, frequency for SAE / dictionary codes,
        variance for neurons and PCA; dead units last).
    max_units : int, optional
        Show only the first ``max_units`` units of the order (all are measured).
    random_state : int, default=0
        Seed of the uniform sample of active rows the quantile bands come from.
    device : str, default="cpu"
        Torch device of an SAE basis.
    progress : bool, optional
        Progress bar (None: only on a terminal).
    inputs : None, False, str or RecordedInputs
        None: the store's recorded inputs (an error when it has none); a path: re-attached
        with :func:`actkit.extractors.record_inputs`; False: no examples' inputs.
    scheduler : None, str or distributed.Client
        Run the pass on Dask (``docs/dask.md``); the same result as here.
    k_tokens : int, default=200
        Rows per unit its ``top_tokens`` are counted over (its ``k_tokens`` highest: the same
        pass keeps ``max(k, k_tokens)`` top rows; :func:`actkit._units._tokens.top_tokens`).
    lens_raw : bool, default=False
        The logit lens without the final norm folded in (``direction @ W_U``); by default a
        residual layer's directions are read through the final LayerNorm's gain (and its
        centring), as sae_vis does (:mod:`actkit._units._lens`).
    eval_fraction : float, default=0.2
        With recorded inputs, the share of input samples held out for ``token_r2`` and
        ``context_r2`` (a seeded choice by ``random_state``; docs/definitions.md, section 7).
    max_rows : int, optional
        Score the token R^2 on whole input samples up to this many rows (default: all rows).

    Returns
    -------
    UnitReport

    Notes
    -----
    With recorded inputs each unit also gets ``token_purity``, ``token_r2``, ``context_r2`` and
    ``description`` (docs/definitions.md, section 7), folded into the same pass plus one pass
    over the held-out rows. Their memory: per unit, float64 sums over the keys seen in both
    splits (at most the held-out rows' tokens and pairs, whatever the vocabulary) and four per
    held-out sample; the units are scored in chunks (a pass per chunk) where that passes
    ``actkit._units._scores.SCORE_BYTES`` (512 MiB).
    """
    check_device(device)  # a bad device is refused before any work
    k = _int("k", k, 1)
    k_tokens = _int("k_tokens", k_tokens, 1)
    context = _int("context", context, 0)
    if max_units is not None:
        max_units = _int("max_units", max_units, 1)
    check_split(eval_fraction, max_rows)
    store, layer, opened = open_units_store(store, layer)
    try:
        b = resolve_basis(basis, store, layer, device=device)
        if order is not None and isinstance(order, str) and order not in ORDERS:
            raise InputError(f"order must be one of {', '.join(ORDERS)} or a list of unit indices, got {order!r}")
        codes, names, label_note = _labels(labels, store[layer], int(store[layer].shape[0]))
        rec = _inputs(store, inputs)
        deep = k if rec is None else max(k, k_tokens)  # top tokens need inputs: no deeper top-k without
        scoring = Scoring.for_inputs(store[layer], rec, eval_fraction=eval_fraction, max_rows=max_rows,
                                     random_state=random_state)  # None without inputs: no token scores
        stats = _run_pass(b, deep, codes, 1 if names is None else len(names), random_state, scheduler, progress,
                          scoring)
        report = _report(store, layer, b, stats, k, context, order, max_units, rec, (names, label_note),
                         random_state, k_tokens, lens_raw)
        return report if scoring is None else scoring.attach(report, rec)
    finally:
        if opened and hasattr(store, "close"):
            store.close()


def _report(store, layer, b, stats, k, context, order, max_units, rec, labels, random_state, k_tokens=K_TOKENS,
            lens_raw=False):
    stats = _orient(stats, b)
    deep = stats.top  # the max(k, k_tokens) highest rows: the top tokens; k of them are shown
    stats = dataclasses.replace(stats, top=tuple(a[:k] for a in stats.top),
                                bottom=None if stats.bottom is None else tuple(a[:k] for a in stats.bottom))
    table = _moments_table(stats)
    flip = stats.flipped
    order_name, ids = _order(order, table, b)
    dead = [int(j) for j in ids if table["dead"][j]]
    shown = ids if max_units is None else ids[:max_units]
    index = np.asarray(store[layer].index)
    attrs = dict(getattr(store[layer], "attrs", {}) or {})
    renderer = Renderer(rec, context, int(index[:, 1].max()) + 1 if index.size else 0, attrs)
    unit_dicts = _unit_dicts(stats, table, b, shown, k, index, renderer)
    add_top_tokens(unit_dicts, deep, k_tokens, b.sparse, index, renderer)
    if renderer.kind == "text":
        add_window_acts(unit_dicts, b, flip, RowLookup(index))
    lens = add_lens(unit_dicts, b, store, layer, flip, rec, raw=lens_raw)
    label_summary = _add_labels(unit_dicts, stats, labels[0])
    if label_summary is not None and labels[1] is not None:
        label_summary["note"] = labels[1]
    data = {"schema": SCHEMA, "store": str(getattr(store, "path", "")), "layer": layer,
            "basis": {"kind": b.kind, "source": b.source, "n_units": b.n_units}, "n_rows": table["n"],
            "n_samples": int(getattr(store, "n_samples", 0) or 0), "k": k, "context": context,
            "order": order_name, "random_state": int(random_state), "k_tokens": k_tokens,
            "flipped": [int(j) for j in np.flatnonzero(flip)], "dead": dead, "inputs": renderer.payload(),
            "logit_lens": lens is not None, "lens": lens, "labels": label_summary, "matches": None, "units": unit_dicts}
    return UnitReport(data)
