"""Layer-by-layer similarity maps of two stores (Kornblith et al. 2019, Figure 1):
:func:`compare_layers`.

A moment-based measure needs, for each pair of layers (i of A, j of B), the side moments of
both layers and their cross scatter. One pass reads every chosen layer of both stores block
by block (each store once for all layers; a store against itself reads it once) and adds
``X_i^T Y_j`` for every pair: ``sum_i sum_j Da_i Db_j`` float64 numbers in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from actkit._data import iter_blocks
from actkit._groups import SampleGroups, check_same_rows
from actkit._json import json_ready
from actkit._frames import frame_html, pandas
from actkit._progress import progress_bar
from actkit._threads import small_linalg
from actkit._warn import warn_user
from actkit.alignment._uncertainty import map_measure
from actkit.errors import LayerError, ValidationError
from actkit.inference import MIN_SAMPLES, Samples, check_resampling, infer
from actkit.measures import Moments, constant_side
from actkit.stats import first_block_shift

#: at most this many bytes of cross scatters in one pass (more: a pass per row of the map)
MAP_BYTES = 1 << 30


@dataclass
class LayerMap:
    """What :func:`compare_layers` returns (a ``(matrix, layers_a, layers_b)`` tuple when
    unpacked).

    Attributes
    ----------
    matrix : ndarray of shape (len(layers_a), len(layers_b))
        ``matrix[i, j]``: the measure between layer ``layers_a[i]`` of A and ``layers_b[j]`` of B.
    layers_a, layers_b : list of str
    measure : str
    p : ndarray of shape (len(layers_a), len(layers_b)) or None
        Permutation p-values (by input sample) with ``permutations``.
    info : dict
    """

    matrix: np.ndarray
    layers_a: list
    layers_b: list
    measure: str = "linear_cka"
    p: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    def __iter__(self):
        return iter((self.matrix, self.layers_a, self.layers_b))

    def __str__(self):
        """The matrix with layer names (rows: A, columns: B); ``*`` marks p > 0.05."""
        mark = self.p is not None
        cells = [[("-" if not np.isfinite(v) else f"{v:.3f}")
                  + (("*" if np.isfinite(self.p[i, j]) and self.p[i, j] > 0.05 else " ") if mark else "")
                  for j, v in enumerate(row)] for i, row in enumerate(self.matrix)]
        w0 = max(len(self.measure), *(len(x) for x in self.layers_a))
        w = max(6 + mark, *(len(x) for x in self.layers_b))
        out = [self.measure.ljust(w0) + "  " + "  ".join(x.rjust(w) for x in self.layers_b)]
        for lab, row in zip(self.layers_a, cells):
            out.append(lab.ljust(w0) + "  " + "  ".join(c.rjust(w) for c in row))
        if mark:
            out.append(f"*: p > 0.05 ({self.info.get('permutations')} permutations of the input samples)")
        return "\n".join(line.rstrip() for line in out)

    def to_frame(self, values: str = "matrix"):
        """A pandas DataFrame, layers x layers: index ``layer_a`` (the layers of A), columns
        ``layer_b`` (those of B); ``values="p"``: the permutation p-values instead (with
        ``permutations`` only)."""
        if values not in ("matrix", "p"):
            raise ValueError(f"values must be 'matrix' or 'p', got {values!r}")
        if values == "p" and self.p is None:
            raise ValueError("this layer map has no p-values: compare_layers(permutations=N) computes them")
        pd = pandas()
        M = self.matrix if values == "matrix" else self.p
        frame = pd.DataFrame(np.asarray(M, dtype=float), index=pd.Index(list(self.layers_a), name="layer_a"),
                             columns=pd.Index(list(self.layers_b), name="layer_b"))
        frame.attrs["measure"] = self.measure
        return frame

    def _repr_html_(self):
        notes = []
        if self.p is not None:
            notes.append(f"p-values: .to_frame('p') ({self.info.get('permutations')} permutations of the input samples)")
        return frame_html(self.to_frame(), caption=f"{self.measure}: layers of A (rows) x layers of B (columns)",
                          notes=notes, float_format="{:.3f}")

    def to_dict(self) -> dict:
        """The map as JSON values (a cell that is not finite as None: :func:`actkit._json.json_ready`)."""
        out = {"measure": self.measure, "layers_a": list(self.layers_a), "layers_b": list(self.layers_b),
               "matrix": json_ready(np.asarray(self.matrix, dtype=np.float64))}
        if self.p is not None:
            out["p"] = json_ready(np.asarray(self.p, dtype=np.float64))
        out.update(self.info)
        return out


class _ArrayLayers:
    """Arrays in memory seen as a store by :func:`compare_layers`: ``layers`` and
    ``store[name]`` (no fingerprint, no row index: rows are paired by position)."""

    def __init__(self, arrays: dict):
        self._arrays = arrays
        self.layers = list(arrays)

    def __getitem__(self, name):
        return self._arrays[name]


def _as_store(x, name):
    """A store as it is; a dict of layer name -> 2-D array, a list of 2-D arrays or a 3-D
    array (layers "0", "1", ...) or one 2-D array (layer "0") in :class:`_ArrayLayers`."""
    if hasattr(x, "layers") and hasattr(x, "__getitem__") and not isinstance(x, (dict, np.ndarray)):
        return x
    if isinstance(x, dict):
        arrays = {str(k): np.asarray(v) for k, v in x.items()}
    elif isinstance(x, (list, tuple)) or getattr(x, "ndim", None) == 3:
        arrays = {str(i): np.asarray(v) for i, v in enumerate(x)}
    elif getattr(x, "ndim", None) == 2 or hasattr(x, "__array__"):
        arrays = {"0": np.asarray(x)}
    else:
        raise ValidationError(f"{name} must be a store (actkit.open_store), a dict of layer name -> 2-D array, a list "
                              f"of 2-D arrays or one 2-D array; got {type(x).__name__}")
    bad = [k for k, v in arrays.items() if v.ndim != 2]
    if not arrays or bad:
        what = f"layer {bad[0]!r} has shape {arrays[bad[0]].shape}" if bad else "it holds no layer"
        raise ValidationError(f"{name}: every layer must be 2-D (n_rows, n_features); {what}")
    return _ArrayLayers(arrays)


def _resolve(store, layers, name):
    have = list(store.layers)
    if layers is None:
        return have
    layers = [layers] if isinstance(layers, str) else list(layers)
    bad = [x for x in layers if x not in have]
    if bad:
        raise LayerError(f"{name} has no layer {bad[0]!r}; its layers: {', '.join(have)}")
    return layers


def _check_shared(store_a, store_b, la, lb):
    """Every layer of both stores holds the same rows (:func:`actkit._groups.check_same_rows`);
    returns their number."""
    layers = [store_a[x] for x in la] + [store_b[x] for x in lb]
    names = [f"{getattr(store_a, 'path', 'A')}:{x}" for x in la] + [f"{getattr(store_b, 'path', 'B')}:{x}" for x in lb]
    check_same_rows(layers, names, need="a layer map needs the same inputs")
    return int(layers[0].shape[0])


def _moments_pass(sources_a, sources_b, pairs, block_rows, progress):
    """One read of every source; side sums/scatters per source and ``X_i^T Y_j`` per pair."""
    allsrc = list(sources_a) + list(sources_b)
    uniq, where = [], []
    for X in allsrc:                     # a store against itself: each layer read once
        for k, Y in enumerate(uniq):
            if Y is X:
                where.append(k)
                break
        else:
            where.append(len(uniq))
            uniq.append(X)
    n = uniq[0].shape[0]
    shifts = [None] * len(uniq)
    sums = [np.zeros(X.shape[1]) for X in uniq]
    sq = [np.zeros((X.shape[1], X.shape[1])) for X in uniq]
    cross = {pq: np.zeros((allsrc[pq[0]].shape[1], allsrc[pq[1]].shape[1])) for pq in pairs}
    br = block_rows or max(64, (32 << 20) // (8 * sum(X.shape[1] for X in uniq)))
    iters = [iter_blocks(X, block_rows=br, dtype=np.float64) for X in uniq]
    with progress_bar(n, "layer map: moments", progress) as bar, small_linalg():
        for blocks in zip(*iters):
            xs = []
            for k, x in enumerate(blocks):
                x = np.array(x, dtype=np.float64)
                if not np.isfinite(x).all():
                    raise ValidationError("non-finite values in a layer of the map")
                if shifts[k] is None:
                    shifts[k] = first_block_shift(x)
                x -= shifts[k]
                sums[k] += x.sum(axis=0)
                sq[k] += x.T @ x
                xs.append(x)
            for (i, j), acc in cross.items():
                acc += xs[where[i]].T @ xs[where[j]]
            bar.update(blocks[0].shape[0])
    return n, where, shifts, sums, sq, cross


def compare_layers(A_store, B_store, measure="linear_cka", layers_a=None, layers_b=None,
                   permutations=0, *, random_state=0, groups=None, block_rows=None,
                   progress=None, **params) -> LayerMap:
    """The similarity of every layer of A with every layer of B (a layer-by-layer map).

    Parameters
    ----------
    A_store, B_store : Store, dict of str to array-like, list of array-like or array-like
        Stores of the same inputs (:func:`actkit.open_store`); the same store twice gives
        the self-similarity map. Arrays in memory, each of shape (n_rows, n_features): a
        dict names its layers; a list, or a 3-D array (n_layers, n_rows, n_features), has
        layers ``"0"``, ``"1"``, ...; one 2-D array is layer ``"0"`` (a 1 x 1 map).
    measure : str, default="linear_cka"
        A moment-based measure (computed exactly from the moments of the layer pair).
    layers_a, layers_b : list of str, optional
        Default: every layer of each store, in the store's order.
    permutations : int, default=0
        With N > 0, each cell also gets its permutation p-value (B's input samples shuffled
        against A's; :func:`actkit.compare`'s scheme), seeded by ``random_state``.
    groups : array-like of shape (n_rows,), optional
        Input sample of each row; default: the stores' own.
    block_rows : int, optional
    progress : bool, optional
    **params
        Parameters of the measure.

    Returns
    -------
    LayerMap
        ``matrix`` (len(layers_a), len(layers_b)), ``layers_a``, ``layers_b`` (unpacks as
        ``matrix, layers_a, layers_b``), ``p`` with permutations.
    """
    check_resampling(permutations, 0, 0.95)
    A_store, B_store = _as_store(A_store, "A"), _as_store(B_store, "B")
    dtype = "float32" if all(str(getattr(X, "dtype", "")) == "float32" for X in
                             [A_store[x] for x in _resolve(A_store, layers_a, "A")]) else "float64"
    compute, kind = map_measure(measure, params, dtype)
    la = _resolve(A_store, layers_a, "A")
    lb = _resolve(B_store, layers_b, "B")
    n = _check_shared(A_store, B_store, la, lb)
    src_a, src_b = [A_store[x] for x in la], [B_store[x] for x in lb]
    if groups is None:
        g = getattr(src_a[0], "groups", None)
        groups = g if isinstance(g, np.ndarray) else None
    if permutations:
        G = SampleGroups.of(groups, n).G if groups is not None else n
        if G < MIN_SAMPLES:
            raise ValidationError(f"permutations need at least {MIN_SAMPLES} input samples, got {G}")
    K = len(la)
    widths = sum(X.shape[1] for X in src_a) * sum(X.shape[1] for X in src_b) * 8
    rows_per_pass = K if widths <= MAP_BYTES else 1
    matrix = np.full((len(la), len(lb)), np.nan)
    const_a, const_b = set(), set()  # layers without variance (indexes): their cells stay NaN
    for r0 in range(0, K, rows_per_pass):
        rows = list(range(r0, min(K, r0 + rows_per_pass)))
        sa = [src_a[i] for i in rows]
        pairs = [(i, len(sa) + j) for i in range(len(sa)) for j in range(len(lb))]
        nn, where, shifts, sums, sq, cross = _moments_pass(sa, src_b, pairs, block_rows, progress)
        for (i, jj), xy in cross.items():
            ka, kb = where[i], where[jj]
            u, v = sums[ka], sums[kb]
            m = Moments.from_sums(nn, u, v, sq[ka], sq[kb], xy, shift_a=shifts[ka],
                                  shift_b=shifts[kb], dtype=dtype)
            side = constant_side(m) or ""
            const_a.update([rows[i]] if "A" in side else [])
            const_b.update([jj - len(sa)] if "B" in side else [])
            matrix[rows[i], jj - len(sa)] = np.nan if side else compute(m)
    p = inf = None
    if permutations:
        p = np.full_like(matrix, np.nan)
        cache = {}

        def rows_of(X):
            key = id(X)
            if key not in cache:
                cache[key] = np.concatenate([np.array(b, dtype=np.float64) for b in
                                             iter_blocks(X, block_rows=block_rows, dtype=np.float64)])
            return cache[key]

        for i, Xa in enumerate(src_a):
            for j, Xb in enumerate(src_b):
                if i in const_a or j in const_b:
                    continue
                s = Samples(rows_of(Xa), rows_of(Xb), groups, dtype=dtype)
                rec, inf = infer(s, {measure: (compute, kind)}, permutations=permutations,
                                 random_state=random_state)
                p[i, j] = rec[measure].p
    info = {"n_rows": int(n), "permutations": int(permutations)}
    constant = [f"A:{la[i]}" for i in sorted(const_a)] + [f"B:{lb[j]}" for j in sorted(const_b)]
    if constant:
        info["constant_layers"] = constant
        warn_user(f"layer(s) {', '.join(constant)} are constant (every row the same, zero variance): "
                  f"{measure} is undefined there, their cells are NaN (shown as -)")
    if permutations and inf is not None:
        info["permutation_exchangeable"] = inf["permutation_exchangeable"]
    return LayerMap(matrix, la, lb, measure, p, info)
