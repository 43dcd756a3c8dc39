"""``actkit.units``: validation, the one pass, and the report's data."""

from __future__ import annotations

import os

import numpy as np

from actkit.errors import InputError, LayerError
from actkit.units._basis import DEFAULT_ORDER, resolve_basis
from actkit.units._examples import Renderer
from actkit.units._hist import trimmed
from actkit.units._lens import logit_lens
from actkit.units._pass import finish, unit_pass
from actkit.units._report import SCHEMA, UnitReport
from actkit.units._score_plan import check_split
from actkit.units._select import SELECTIVE_AUROC, selectivity

__all__ = ["ORDERS", "open_units_store", "units"]

ORDERS = ("skewness", "frequency", "variance", "kurtosis", "index")
#: quantile bands of a unit's active rows below its top examples (fractions of the ranked rows)
BANDS = ((0.5, 0.9), (0.9, 0.99), (0.99, 1.0))
MAX_CLASSES = 256


def _int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def open_units_store(store, layer):
    """``(store, layer name, opened here)`` of a path or an open store; one line for a missing layer."""
    opened = isinstance(store, (str, os.PathLike))
    if opened:
        from actkit.matrix_files import open_source  # stores and embedding files: the analysis commands' one door

        store = open_source(store)
    names = list(store.layers)
    if layer is None:
        if len(names) != 1:
            raise LayerError(f"{store.path} has {len(names)} layers ({', '.join(names[:12])}); pick one with --layer")
        layer = names[0]
    if layer not in names:
        raise LayerError(f"{store.path} has no layer {layer!r} (it has {', '.join(names[:12])}); pick one with --layer")
    return store, layer, opened


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
        return rec
    if hasattr(inputs, "kind") and hasattr(inputs, "n_samples"):
        return inputs
    from actkit.extractors import record_inputs  # re-attaching inputs reads them as extraction does (jobs floor)

    return record_inputs(store, inputs)


def _labels(labels, layer_obj, n):
    """``(codes (n,) int64, names)`` or ``(None, None)``; one line for a wrong length."""
    if labels is None:
        return None, None
    if isinstance(labels, (str, os.PathLike)):
        from actkit.evaluation import read_labels  # the label files of actkit evaluate

        labels = read_labels(labels, layer=layer_obj)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise InputError(f"labels: {labels.shape[0] if labels.ndim else 0} labels for {n} rows; "
                         "give one label per row of the layer")
    names, codes = np.unique(labels.astype(str), return_inverse=True)
    if names.size > MAX_CLASSES:
        raise InputError(f"labels: {names.size} distinct labels; at most {MAX_CLASSES} are scored per unit")
    return codes.astype(np.int64).ravel(), [str(x) for x in names]


def _run_pass(basis, k, codes, n_classes, random_state, scheduler, progress, scoring=None):
    from actkit.runners import runner_for  # the runner decides where the pass runs

    width = max(basis.n_units, int(basis.rows.shape[1]))
    rows = int(max(64, min(16384, (16 << 20) // (4 * width))))
    threads = basis.sae is None or str(getattr(basis.sae, "device", "cpu")) == "cpu"
    if scoring is not None:  # the token scores folded into the same pass, then the held-out rows
        return scoring.run(basis, k, rows, codes, n_classes, random_state, threads, scheduler, progress)
    p = unit_pass(basis, k, rows, labels=codes, classes=n_classes, random_state=random_state, threads=threads)
    with runner_for(basis.rows, scheduler, block_rows=rows) as (X, runner):
        return finish(runner.run(X, p, desc="units", progress=progress))


def _moments_table(acc, basis):
    n, mean, m2, m3, m4 = acc["moments"]
    var = m2 / max(n - 1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(m2 > 0, np.sqrt(n) * m3 / m2 ** 1.5, 0.0)
        kurt = np.where(m2 > 0, n * m4 / m2 ** 2 - 3.0, 0.0)
    return {"n": int(n), "mean": mean, "variance": var, "sd": np.sqrt(var), "skewness": skew, "kurtosis": kurt,
            "active": acc["active"] / max(n, 1)}


def _orient(acc, table, basis):
    """ICA sources with negative skewness are flipped (top <-> bottom, values negated)."""
    flip = np.zeros(basis.n_units, bool)
    if basis.kind == "ica":
        flip = table["skewness"] < 0
        for key in ("mean", "skewness"):
            table[key] = np.where(flip, -table[key], table[key])
    top, bottom = acc["top"], acc["bottom"]  # bottom holds the largest of -activation
    acc["top"] = (np.where(flip, bottom[0], top[0]), np.where(flip, bottom[1], top[1]))
    acc["bottom"] = (-np.where(flip, top[0], bottom[0]), np.where(flip, top[1], bottom[1]))
    acc["sample"] = (np.where(flip, -acc["sample"][2], acc["sample"][2]), acc["sample"][1])  # (value, row)
    return flip


def _order(order, table, basis, flip):
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
    dead = table["active"][ids] == 0
    return name, np.concatenate([ids[~dead], ids[dead]])


def _bands(values, rows, top_rows, per_band):
    """Quantile bands of each shown unit's active rows, from its uniform sample (in priority
    order): ``values``, ``rows`` (SAMPLE, m) of the m shown units (row -1: an empty slot),
    ``top_rows`` (k, m) the rows of their top examples (never repeated in a band; -1: none).
    One list of bands per unit ([] for a unit without active rows); all units at once."""
    ok = rows >= 0
    qs = [q for band in BANDS for q in band]
    Q = np.zeros((len(qs), rows.shape[1]))
    full = ok.all(axis=0)
    if full.any():
        Q[:, full] = np.quantile(values[:, full], qs, axis=0)
    for j in np.flatnonzero(~full & ok.any(axis=0)):  # a sample not filled: its own rows (a prefix)
        Q[:, j] = np.quantile(values[ok[:, j], j], qs)
    fresh = ok & ~(rows[:, None, :] == np.where(top_rows >= 0, top_rows, -2)[None]).any(axis=1)
    out = [[] for _ in range(rows.shape[1])]
    for b in reversed(range(len(BANDS))):
        (lo_q, hi_q), lo, hi = BANDS[b], Q[2 * b], Q[2 * b + 1]
        inside = fresh & (values >= lo) & ((values < hi) | (hi_q == 1.0))
        pick = inside & (np.cumsum(inside, axis=0) <= per_band)  # the first per_band in priority order
        units, slots = np.nonzero(pick.T)
        cut = np.searchsorted(units, np.arange(rows.shape[1] + 1))
        for j in np.flatnonzero(ok.any(axis=0)):
            sl = slots[cut[j]:cut[j + 1]]
            out[j].append({"quantiles": [lo_q, hi_q], "lo": float(lo[j]), "hi": float(hi[j]),
                           "examples": [(int(r), float(v)) for r, v in zip(rows[sl, j], values[sl, j])]})
    return out


def _examples(entries, index, renderer):
    return [renderer.example(r, v, index[r, 0], index[r, 1]) for r, v in entries]


def _unit_dicts(acc, table, basis, ids, flip, k, index, renderer):
    """One dict per shown unit (the schema of :class:`UnitReport`), examples rendered."""
    out = []
    ids = np.asarray(ids, np.int64)
    top_rows = np.where(acc["top"][0] > 0, acc["top"][1], -1) if basis.sparse else acc["top"][1]
    bands_of = _bands(acc["sample"][0][:, ids], acc["sample"][1][:, ids], top_rows[:, ids], max(1, min(5, k)))
    for rank, j in enumerate(ids):
        j = int(j)
        top = [(int(r), float(v)) for v, r in zip(acc["top"][0][:, j], top_rows[:, j]) if r >= 0]
        bottom = [] if basis.sparse else [(int(r), float(v)) for v, r in
                                          zip(acc["bottom"][0][:, j], acc["bottom"][1][:, j]) if r >= 0]
        counts, edges = trimmed(acc["hist"], j)
        counts = counts.sum(axis=0)
        if flip[j]:
            counts, edges = counts[::-1], -edges[::-1]
        bands = bands_of[rank]
        for b in bands:
            b["examples"] = _examples(b["examples"], index, renderer)
        out.append({"unit": j, "rank": rank, "mean": table["mean"][j], "sd": table["sd"][j],
                    "variance": table["variance"][j], "skewness": table["skewness"][j],
                    "kurtosis": table["kurtosis"][j], "active_share": table["active"][j],
                    "dead": bool(table["active"][j] == 0), "flipped": bool(flip[j]),
                    "hist": {"counts": counts, "edges": edges}, "top": _examples(top, index, renderer),
                    "bottom": _examples(bottom, index, renderer), "bands": bands, "logits": None,
                    "label": None, "match": None})
    return out


def _add_lens(unit_dicts, basis, store, layer, flip, inputs):
    W = store.params.get("unembedding") if hasattr(store, "params") else None
    if W is None or int(np.asarray(W).shape[1]) != int(store[layer].shape[1]):
        return False
    dirs = basis.directions()
    if dirs is not None:
        dirs = np.where(flip[:, None], -dirs, dirs)
    elif basis.kind != "neuron":
        return False
    vocab = getattr(inputs, "vocab", None) if inputs is not None else None
    lens = logit_lens(dirs, W, [u["unit"] for u in unit_dicts])
    for u in unit_dicts:
        up, lp, down, ld = lens[u["unit"]]
        name = (lambda i: str(vocab[i]) if vocab is not None and i < len(vocab) else None)
        u["logits"] = {"promoted": [[int(i), name(i), float(v)] for i, v in zip(up, lp)],
                       "suppressed": [[int(i), name(i), float(v)] for i, v in zip(down, ld)]}
    return True


def _add_labels(unit_dicts, acc, names, flip):
    if names is None:
        return None
    own = set()
    for u in unit_dicts:
        counts, _ = trimmed(acc["hist"], u["unit"])
        if flip[u["unit"]]:
            counts = counts[:, ::-1]
        c, auc, mi = selectivity(counts)
        if c is None:
            continue
        u["label"] = {"name": names[c], "auroc": auc, "mutual_information": mi}
        if auc >= SELECTIVE_AUROC:
            own.add(names[c])
    return {"names": names, "with_own_unit": sorted(own), "count": len(own), "threshold": SELECTIVE_AUROC}


def units(store, layer=None, *, basis=None, k=20, context=8, labels=None, order=None, max_units=None,
          random_state=0, device="cpu", progress=None, inputs=None, scheduler=None, eval_fraction=0.2,
          max_rows=None) -> UnitReport:
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
    labels : array-like of shape (n_rows,) or str, optional
        One label per row (or a label file / column as ``actkit evaluate`` reads it): per
        unit the label it is most selective for (one-vs-rest AUROC, mutual information).
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
    ``actkit.units._scores.SCORE_BYTES`` (512 MiB).
    """
    k = _int("k", k, 1)
    context = _int("context", context, 0)
    if max_units is not None:
        max_units = _int("max_units", max_units, 1)
    check_split(eval_fraction, max_rows)
    store, layer, opened = open_units_store(store, layer)
    try:
        b = resolve_basis(basis, store, layer, device=device)
        if order is not None and isinstance(order, str) and order not in ORDERS:
            raise InputError(f"order must be one of {', '.join(ORDERS)} or a list of unit indices, got {order!r}")
        codes, names = _labels(labels, store[layer], int(store[layer].shape[0]))
        rec = _inputs(store, inputs)
        from actkit.units._unit_scores import Scoring  # token scores: where the inputs name each row's token

        scoring = Scoring.for_inputs(store[layer], rec, eval_fraction=eval_fraction, max_rows=max_rows,
                                     random_state=random_state)
        acc = _run_pass(b, k, codes, 1 if names is None else len(names), random_state, scheduler, progress, scoring)
        report = _report(store, layer, b, acc, k, context, order, max_units, rec, names, random_state)
        return report if scoring is None else scoring.attach(report, rec)
    finally:
        if opened and hasattr(store, "close"):
            store.close()


def _report(store, layer, b, acc, k, context, order, max_units, rec, names, random_state):
    table = _moments_table(acc, b)
    flip = _orient(acc, table, b)
    order_name, ids = _order(order, table, b, flip)
    dead = [int(j) for j in ids if table["active"][j] == 0]
    shown = ids if max_units is None else ids[:max_units]
    index = np.asarray(store[layer].index)
    attrs = dict(getattr(store[layer], "attrs", {}) or {})
    renderer = Renderer(rec, context, int(index[:, 1].max()) + 1 if index.size else 0, attrs)
    unit_dicts = _unit_dicts(acc, table, b, shown, flip, k, index, renderer)
    lens = _add_lens(unit_dicts, b, store, layer, flip, rec)
    label_summary = _add_labels(unit_dicts, acc, names, flip)
    data = {"schema": SCHEMA, "store": str(getattr(store, "path", "")), "layer": layer,
            "basis": {"kind": b.kind, "source": b.source, "n_units": b.n_units}, "n_rows": table["n"],
            "n_samples": int(getattr(store, "n_samples", 0) or 0), "k": k, "context": context,
            "order": order_name, "random_state": int(random_state),
            "flipped": [int(j) for j in np.flatnonzero(flip)], "dead": dead, "inputs": renderer.payload(),
            "logit_lens": lens, "labels": label_summary, "matches": None, "units": unit_dicts}
    return UnitReport(data)
